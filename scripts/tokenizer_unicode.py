"""Dump the Unicode view of the reference tokenizer (HF `tokenizers`).

The reference's split regex runs on Oniguruma and its NFC normalizer on the
`unicode-normalization-alignments` crate; both carry their own Unicode tables,
which differ from Go's. This script asks the reference itself, code point by
code point, and prints JSON:

  {"L": [[lo, hi], ...],   # matched by \\p{L}
   "N": [[lo, hi], ...],   # matched by \\p{N}
   "S": [[lo, hi], ...],   # matched by \\s
   "ccc": {"cp": ccc, ...},# non-zero canonical combining classes, as NFC applies them
   "nocompose": [cp, ...], # primary composites (per Python's tables) it does not compose
   "unicode": "14.0.0"}    # Python's unicodedata version (for the record only)

Nothing here comes from Python's unicodedata except the choice of probe marks.
"""
import json
import sys
import unicodedata

from tokenizers import Regex, normalizers, pre_tokenizers

CPS = [c for c in range(0x110000) if not (0xD800 <= c < 0xE000)]


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def regex_class(pattern):
    text = "".join(map(chr, CPS))
    pieces = pre_tokenizers.Split(Regex(pattern), "removed").pre_tokenize_str(text)
    covered = bytearray(len(CPS))
    for _, (a, b) in pieces:  # offsets are in characters
        for i in range(a, b):
            covered[i] = 1
    return [CPS[i] for i in range(len(CPS)) if not covered[i]]


NFC = normalizers.NFC()
SEP = "\u4e00"  # a starter that composes with nothing


def nfc_batch(strs):
    out = NFC.normalize_str("".join(SEP + s for s in strs)).split(SEP)[1:]
    assert len(out) == len(strs)
    return out


def ccc_table():
    cps = [c for c in CPS if c != ord(SEP)]
    single = nfc_batch([chr(c) for c in cps])
    stable = [c for c, o in zip(cps, single) if o == chr(c)]
    lo, hi = "\u0334", "\u0345"  # ccc 1 and 240 in every Unicode version
    after = nfc_batch([chr(c) + lo for c in stable])
    before = nfc_batch([hi + chr(c) for c in stable])
    nonzero = [c for c, x, y in zip(stable, after, before) if x == lo + chr(c) or y == chr(c) + hi]
    # One probe mark per ccc value, taken from marks that are non-zero in the reference.
    reps = {}
    for c in nonzero:
        k = unicodedata.combining(chr(c))
        if k and k not in reps:
            reps[k] = chr(c)
    table = {}
    for c in nonzero:
        ch = chr(c)
        vals = sorted(reps)
        probes = nfc_batch([ch + reps[v] for v in vals] + [reps[v] + ch for v in vals])
        n = len(vals)
        same = [v for i, v in enumerate(vals)
                if probes[i] == ch + reps[v] and probes[n + i] == reps[v] + ch]
        if len(same) != 1:
            sys.exit(f"U+{c:04X}: cannot pin its ccc (candidates {same})")
        table[str(c)] = same[0]
    return table


def no_compose():
    pairs = []
    for c in CPS:
        d = unicodedata.decomposition(chr(c))
        if not d or d.startswith("<"):
            continue
        parts = [chr(int(x, 16)) for x in d.split()]
        if len(parts) == 2 and unicodedata.normalize("NFC", "".join(parts)) == chr(c):
            pairs.append((c, "".join(parts)))
    got = nfc_batch([p for _, p in pairs])
    return [c for (c, _), g in zip(pairs, got) if g != chr(c)]


def main():
    out = {
        "L": ranges(regex_class(r"\p{L}")),
        "N": ranges(regex_class(r"\p{N}")),
        "S": ranges(regex_class(r"\s")),
        "ccc": ccc_table(),
        "nocompose": no_compose(),
        "unicode": unicodedata.unidata_version,
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
