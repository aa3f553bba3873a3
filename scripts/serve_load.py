"""Latency and memory of a running `evolm serve` (the figures in docs/reliability.md).

    serve_load.py fair URL PID [--small N]   p50/p99 latency of small requests while a
                                             max_tokens 3000 x n 16 request decodes
    serve_load.py load URL PID [--clients 64 --requests 4]
                                             peak RSS under concurrent clients
    serve_load.py long URL PID [--tokens 8000]
                                             peak RSS with one long prompt

PID is the server's process id: peak RSS is its VmHWM from /proc, so start
a fresh server per figure. Loopback URLs only; the load is bounded by the
arguments. Prints one JSON object.
"""
import argparse
import json
import threading
import time
import urllib.error
import urllib.request


def post(url, body, timeout=3600):
    req = urllib.request.Request(url + "/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    return status, time.monotonic() - t0


def vm(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


SMALL = {"prompt": "Hello there", "max_tokens": 16, "temperature": 0}


def fair(a):
    big_done = threading.Event()
    big = {}

    def run_big():
        big["status"], big["s"] = post(a.url, {"prompt": "Tell a long story.", "max_tokens": 3000, "n": 16,
                                               "temperature": 1, "seed": 1})
        big_done.set()

    post(a.url, SMALL)  # warm-up
    solo = [post(a.url, SMALL)[1] for _ in range(5)]
    th = threading.Thread(target=run_big, daemon=True)
    th.start()
    time.sleep(2)
    lat, statuses = [], []
    for _ in range(a.small):
        st, s = post(a.url, SMALL, timeout=a.timeout)
        statuses.append(st)
        lat.append(s)
        if big_done.is_set():
            break
    out = {"figure": "small request latency while a max_tokens 3000 x n 16 request runs",
           "small_requests": len(lat), "statuses": sorted(set(statuses)),
           "small_alone_p50_s": round(pct(solo, 50), 3),
           "p50_s": round(pct(lat, 50), 3), "p99_s": round(pct(lat, 99), 3), "max_s": round(max(lat), 3),
           "large_finished_during_test": big_done.is_set()}
    if big_done.is_set():
        out["large_s"] = round(big["s"], 1)
    print(json.dumps(out))


def load(a):
    base = vm(a.pid, "VmRSS")
    lat, statuses, lock = [], [], threading.Lock()

    def client(i):
        for j in range(a.requests):
            st, s = post(a.url, {"prompt": f"Client {i} asks question {j}: why is the sky blue?", "max_tokens": 32,
                                 "temperature": 1, "seed": i * 100 + j})
            with lock:
                lat.append(s)
                statuses.append(st)

    t0 = time.monotonic()
    ths = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    print(json.dumps({"figure": f"{a.clients}-client load", "requests": len(lat), "statuses": sorted(set(statuses)),
                      "wall_s": round(time.monotonic() - t0, 1), "p50_s": round(pct(lat, 50), 3),
                      "p99_s": round(pct(lat, 99), 3), "rss_before_mib": base >> 20,
                      "peak_rss_mib": vm(a.pid, "VmHWM") >> 20}))


def long(a):
    base = vm(a.pid, "VmRSS")
    st, s = post(a.url, {"prompt": " hello" * a.tokens, "max_tokens": 4})
    print(json.dumps({"figure": f"one prompt of about {a.tokens} tokens", "status": st, "s": round(s, 1),
                      "rss_before_mib": base >> 20, "peak_rss_mib": vm(a.pid, "VmHWM") >> 20}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["fair", "load", "long"])
    p.add_argument("url")
    p.add_argument("pid", type=int)
    p.add_argument("--small", type=int, default=100)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--tokens", type=int, default=8000)
    a = p.parse_args()
    assert a.url.startswith("http://127.") or a.url.startswith("http://localhost"), "loopback only"
    {"fair": fair, "load": load, "long": long}[a.mode](a)


if __name__ == "__main__":
    main()
