"""Reference encodings from HF `tokenizers` for evolm's tokenizer parity tests.

usage: tokenizer_reference.py TOKENIZER_JSON IN.jsonl OUT.jsonl

Each input line is a JSON string. Each output line is a JSON object:
  {"ids": [...],          # encode(s, add_special_tokens=False)
   "ids_split": [...],    # the same with encode_special_tokens=True
   "nfc": "...",          # the file's normalizer applied to s
   "pieces": [...],       # the pre-tokenizer's pieces of nfc (byte-level
                          # alphabet; added tokens are not split out here)
   "decoded": "...",      # decode(ids, skip_special_tokens=False)
   "decoded_skip": "..."} # decode(ids, skip_special_tokens=True)
"""
import json
import sys

import tokenizers
from tokenizers import Tokenizer


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    path, src, dst = sys.argv[1:]
    tok = Tokenizer.from_file(path)
    split = Tokenizer.from_file(path)
    split.encode_special_tokens = True
    with open(src, encoding="utf-8") as f:
        texts = [json.loads(line) for line in f if line.strip()]
    encs = tok.encode_batch(texts, add_special_tokens=False)
    encs_split = split.encode_batch(texts, add_special_tokens=False)
    norm = tok.normalizer
    with open(dst, "w", encoding="utf-8") as out:
        for text, enc, enc_split in zip(texts, encs, encs_split):
            nfc = norm.normalize_str(text) if norm is not None else text
            rec = {
                "ids": enc.ids,
                "pieces": [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(nfc)],
                "ids_split": enc_split.ids,
                "nfc": nfc,
                "decoded": tok.decode(enc.ids, skip_special_tokens=False),
                "decoded_skip": tok.decode(enc.ids, skip_special_tokens=True),
            }
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print(f"tokenizers {tokenizers.__version__}: {len(texts)} texts", file=sys.stderr)


if __name__ == "__main__":
    main()
