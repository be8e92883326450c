"""Print "N passed, N failed" for a meson test run, counting test cases rather than programs:
cmocka's [  PASSED  ]/[  FAILED  ] counts, the parity runner's "ok case"/"FAIL case" lines, and
one per other program; a program that exits 77 is skipped. A program that crashed before counting its own failures counts as one
failure. Usage: summarize.py BUILD_DIR"""
import json
import re
import sys

passed = failed = skipped = 0
with open(sys.argv[1] + "/meson-logs/testlog.json", encoding="utf-8") as f:
    for line in f:
        t = json.loads(line)
        out = (t.get("stdout") or "") + (t.get("stderr") or "")
        if t.get("result") == "SKIP":
            skipped += 1
            continue
        ok = t.get("result") == "OK"
        p = sum(int(n) for n in re.findall(r"^\[  PASSED  \] (\d+) test", out, re.M))
        fl = sum(int(n) for n in re.findall(r"^\[  FAILED  \] (\d+) test", out, re.M))
        p += len(re.findall(r"^ok case ", out, re.M))
        fl += len(re.findall(r"^FAIL case ", out, re.M))
        if p == 0 and fl == 0:
            p, fl = (1, 0) if ok else (0, 1)
        elif not ok and fl == 0:
            fl = 1
        passed += p
        failed += fl
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
