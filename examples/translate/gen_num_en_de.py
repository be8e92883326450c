#!/usr/bin/python3
"""Generate the num-en-de toy corpus: English number words -> German numbers written as one word.

    python3 examples/translate/gen_num_en_de.py OUTDIR

Writes OUTDIR/train.tsv (20 000 pairs) and OUTDIR/test.tsv (2 000 pairs), for example

    eighty-seven thousand, four hundred and thirty-two	siebenundachtzigtausendvierhundertzweiunddreißig

German writes every number below a million as one word, so nearly every target sentence is a
word seen once: a word vocabulary cannot learn it, subwords can. The integers are drawn and
split exactly as gen_num_en_fr.py does (its draw and split, another seed); both spellings are
made here, with no dependency. Deterministic: byte-identical files on every run.
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_num_en_fr import N_TEST, N_TRAIN, draw, split  # noqa: E402

SEED = 20261126

EN_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
           "fifteen sixteen seventeen eighteen nineteen").split()
EN_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
DE_ONES = ("null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn vierzehn "
           "fünfzehn sechzehn siebzehn achtzehn neunzehn").split()
DE_TENS = "_ _ zwanzig dreißig vierzig fünfzig sechzig siebzig achtzig neunzig".split()


def en_below_1000(n):
    """1..999 in British English: "four hundred and forty-six"."""
    h, r = divmod(n, 100)
    if r < 20:
        rest = EN_ONES[r] if r else ""
    else:
        rest = EN_TENS[r // 10] + ("-" + EN_ONES[r % 10] if r % 10 else "")
    if not h:
        return rest
    return EN_ONES[h] + " hundred" + (" and " + rest if rest else "")


def en(n):
    """0..999 999: "two thousand, four hundred and forty-six", "seven thousand and three"."""
    if n == 0:
        return "zero"
    t, r = divmod(n, 1000)
    if not t:
        return en_below_1000(r)
    s = en_below_1000(t) + " thousand"
    if r:
        s += (" and " if r < 100 else ", ") + en_below_1000(r)
    return s


def de_below_1000(n, final):
    """1..999 in German; a final 1 is "eins" (einhunderteins), inside a compound "ein"."""
    h, r = divmod(n, 100)
    if r == 1:
        rest = "eins" if final else "ein"
    elif r < 20:
        rest = DE_ONES[r] if r else ""
    else:
        o = r % 10
        rest = (("ein" if o == 1 else DE_ONES[o]) + "und" if o else "") + DE_TENS[r // 10]
    return (("ein" if h == 1 else DE_ONES[h]) + "hundert" if h else "") + rest


def de(n):
    """0..999 999 as one word: 87 432 → siebenundachtzigtausendvierhundertzweiunddreißig."""
    if n == 0:
        return "null"
    t, r = divmod(n, 1000)
    return (de_below_1000(t, False) + "tausend" if t else "") + (de_below_1000(r, True) if r else "")


def write(path, numbers):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for n in numbers:
            f.write(f"{en(n)}\t{de(n)}\n")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    checks = {1: "eins", 21: "einundzwanzig", 87: "siebenundachtzig", 101: "einhunderteins",
              1001: "eintausendeins", 433000: "vierhundertdreiunddreißigtausend",
              87432: "siebenundachtzigtausendvierhundertzweiunddreißig"}
    assert all(de(n) == w for n, w in checks.items()), "German spelling"
    assert en(691043) == "six hundred and ninety-one thousand and forty-three", "English spelling"
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(SEED)
    train, test = split(rng, draw(rng, N_TRAIN + N_TEST))
    write(os.path.join(out, "train.tsv"), train)
    write(os.path.join(out, "test.tsv"), test)
    print(f"{out}: train {len(train)} pairs, test {len(test)} pairs")


if __name__ == "__main__":
    main()
