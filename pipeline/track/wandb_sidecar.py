"""evolm's W&B sidecar: evolm (pipeline/track) runs it with the Python that has the
wandb package and writes it one JSON object a line on stdin:

  {"op": "init", "project", "entity", "id", "name", "mode", "dir", "tags", "config", "pid"}
  {"op": "log", "step": N, "metrics": {tag: value}}
  {"op": "summary", "values": {key: value}}
  {"op": "finish", "exit_code": 0}

It answers init and finish with one JSON line on its stdout (anything else that
would print there goes to stderr): {"ok": true, "last_step": N} or {"ok": false,
"error": "..."}. last_step is the last step the W&B run already holds (-1: none):
online, the resumed run's step; offline, where W&B cannot be asked, the largest
_step in the run's earlier offline-run-*-<id>/run-<id>.wandb files, read with
the reader below. evolm sends nothing at or before it. On end of input without
finish (evolm was killed) it finishes the run with exit code 1, flushing what it
was sent.

The reader parses wandb-core's transaction log: a 7-byte header (":W&B", u16 LE
0xBEE1, u8 version 0), then LevelDB-log framing in 32 KiB blocks, each chunk
u32 LE CRC-32 (IEEE, unmasked) of its type byte and data, u16 LE length, u8 type
(1 full, 2 first, 3 middle, 4 last), a block tail under 7 bytes being padding;
each reassembled record is a wandb.proto Record. wandb ships no reader of its own.
"""
import fcntl
import glob
import json
import os
import struct
import sys
import zlib

BLOCK = 32 * 1024
CHUNK_HEADER = 7


def records(path):
    """The Record messages of a .wandb file, in order; a torn tail (a writer that
    was killed) ends them."""
    from wandb.proto import wandb_internal_pb2 as pb

    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 7:
        return
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    if ident != b":W&B" or magic != 0xBEE1 or version != 0:
        raise ValueError(f"{path}: not a W&B transaction log (header {ident!r} {magic:#x} {version})")
    pos, buf = 7, b""
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:
            pos += left
            continue
        crc, length, typ = struct.unpack("<IHB", data[pos:pos + CHUNK_HEADER])
        if typ == 0 and length == 0:
            pos += left
            continue
        chunk = data[pos + CHUNK_HEADER:pos + CHUNK_HEADER + length]
        if len(chunk) < length or zlib.crc32(bytes([typ]) + chunk) != crc:
            return  # torn or unwritten tail
        pos += CHUNK_HEADER + length
        if typ == 1:
            buf = chunk
        elif typ == 2:
            buf = chunk
            continue
        elif typ == 3:
            buf += chunk
            continue
        elif typ == 4:
            buf += chunk
        else:
            raise ValueError(f"{path}: chunk type {typ} at offset {pos}")
        r = pb.Record()
        r.ParseFromString(buf)
        yield r


def history(path):
    """The rows run.log wrote to a .wandb file: {key: value}, _step included."""
    for r in records(path):
        if r.WhichOneof("record_type") == "history":
            yield {(it.key or "/".join(it.nested_key)): json.loads(it.value_json) for it in r.history.item}


def run_files(root, run_id):
    """The offline .wandb files of run_id under root (wandb.init's dir), oldest first."""
    return sorted(glob.glob(os.path.join(root, "wandb", f"offline-run-*-{run_id}", f"run-{run_id}.wandb")))


def last_offline_step(root, run_id):
    last = -1
    for path in run_files(root, run_id):
        for row in history(path):
            last = max(last, int(row.get("_step", -1)))
    return last


def main():
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # wandb and anything else print to stderr, never into the protocol

    def reply(**kw):
        proto.write(json.dumps(kw) + "\n")
        proto.flush()

    try:
        import wandb
    except Exception as e:  # noqa: BLE001 - any import failure is reported as is
        reply(ok=False, error=f"{sys.executable} cannot import wandb: {type(e).__name__}: {e}")
        return 2
    run, last = None, -1
    for line in sys.stdin:
        msg = json.loads(line)
        op = msg["op"]
        if op == "init":
            try:
                # One sidecar at a time per run: a killed evolm's sidecar may
                # still be finishing the run (and writing its file) when the
                # resumed run starts the next; wait for it.
                os.makedirs(msg["dir"], exist_ok=True)
                lock = open(os.path.join(msg["dir"], f"wandb-{msg['id']}.lock"), "w")
                fcntl.flock(lock, fcntl.LOCK_EX)
                offline_last = last_offline_step(msg["dir"], msg["id"]) if msg["mode"] == "offline" else -1
                settings = wandb.Settings(console="off", x_stats_pid=msg.get("pid") or os.getppid())
                run = wandb.init(project=msg["project"], entity=msg.get("entity") or None, id=msg["id"],
                                 name=msg.get("name") or None, mode=msg["mode"], dir=msg["dir"],
                                 tags=msg.get("tags") or None, resume="allow", settings=settings)
                run.config.update(msg.get("config") or {}, allow_val_change=True)
                online_last = run.step - 1 if run.resumed else -1
                last = max(offline_last, online_last)
                reply(ok=True, last_step=last, dir=run.dir)
            except Exception as e:  # noqa: BLE001 - reported to evolm, which stops at start-up
                reply(ok=False, error=f"{type(e).__name__}: {e}")
                return 2
        elif op == "log":
            if msg["step"] > last:
                run.log(msg["metrics"], step=msg["step"])
                last = msg["step"]
        elif op == "summary":
            run.summary.update(msg["values"])
        elif op == "finish":
            run.finish(exit_code=msg.get("exit_code", 0))
            reply(ok=True)
            return 0
    if run is not None:
        run.finish(exit_code=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
