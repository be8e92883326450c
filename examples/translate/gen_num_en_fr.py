#!/usr/bin/python3
"""Generate the num-en-fr toy corpus: English number words -> French number words.

    /usr/bin/python3 examples/translate/gen_num_en_fr.py [outdir]

Needs Debian's python3-num2words. Writes <outdir>/train.tsv (20 000 pairs) and
<outdir>/test.tsv (2 000 pairs), default outdir examples/translate/data/num-en-fr next to this
script. Deterministic: the same num2words version gives byte-identical files.

Sampling: integers 0..999 999 drawn without replacement, the number of digits (1..6) uniform,
then uniform among the unused integers with that many digits. There are only 10 one-digit,
90 two-digit and 900 three-digit integers, so those classes run dry and later draws go
uniformly to the digit counts that still have integers left (the result: every 1-3 digit
integer, and the rest spread about evenly over 4, 5 and 6 digits). The 22 000 integers are then
split train/test within each digit count in the proportion 20 000 : 2 000, so the two splits
are disjoint by integer and have the same digit-count distribution.
"""
import os
import random
import sys

SEED = 20240917
N_TRAIN, N_TEST = 20000, 2000


def digit_range(d):
    return (0, 9) if d == 1 else (10 ** (d - 1), 10 ** d - 1)


def draw(rng, total):
    # the unused integers of each class, kept as a list we swap-remove from (O(1) per draw)
    unused = {d: list(range(digit_range(d)[0], digit_range(d)[1] + 1)) for d in range(1, 7)}
    chosen = {d: [] for d in range(1, 7)}
    for _ in range(total):
        d = rng.choice([k for k in range(1, 7) if unused[k]])
        pool = unused[d]
        i = rng.randrange(len(pool))
        pool[i], pool[-1] = pool[-1], pool[i]
        chosen[d].append(pool.pop())
    return chosen


def split(rng, chosen):
    # largest-remainder apportionment of the test share over digit counts, so sizes are exact
    total = sum(len(v) for v in chosen.values())
    quota = {d: len(v) * N_TEST / total for d, v in chosen.items()}
    n_test = {d: int(q) for d, q in quota.items()}
    rest = N_TEST - sum(n_test.values())
    for d in sorted(quota, key=lambda d: (-(quota[d] - n_test[d]), d))[:rest]:
        n_test[d] += 1
    train, test = [], []
    for d in range(1, 7):
        v = list(chosen[d])
        rng.shuffle(v)
        test += v[:n_test[d]]
        train += v[n_test[d]:]
    rng.shuffle(train)
    rng.shuffle(test)
    return train, test


def write(path, numbers):
    from num2words import num2words  # here, so gen_num_en_de.py can import the sampling

    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for n in numbers:
            en, fr = num2words(n, lang="en"), num2words(n, lang="fr")
            assert "\t" not in en + fr and "\n" not in en + fr
            f.write(f"{en}\t{fr}\n")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "data", "num-en-fr")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(SEED)
    train, test = split(rng, draw(rng, N_TRAIN + N_TEST))
    assert len(train) == N_TRAIN and len(test) == N_TEST
    assert len(set(train)) == N_TRAIN and len(set(test)) == N_TEST and not set(train) & set(test)
    write(os.path.join(out, "train.tsv"), train)
    write(os.path.join(out, "test.tsv"), test)
    for name, v in (("train", train), ("test", test)):
        counts = [sum(1 for n in v if len(str(n)) == d) for d in range(1, 7)]
        print(f"{name}: {len(v)} pairs, by digit count 1..6: {counts}")


if __name__ == "__main__":
    main()
