// Command tokenizer-bench times evolm's tokenizer on a corpus; compare.py in
// this directory runs it side by side with HF tokenizers.
//
//	go run ./bench/tokenizer -tokenizer tokenizer.json -corpus docs.jsonl
//
// The corpus is JSON lines, one string (a document) per line. It prints one
// JSON object: bytes, tokens, the best wall and CPU seconds over -passes
// timed passes (after one untimed warm-up pass), and a SHA-256 of all ids so the caller
// can check both tokenizers agree. -threads 1 encodes documents one after
// the other; otherwise EncodeBatch runs GOMAXPROCS workers.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/evolm/evolm/model/tokenizer"
)

func main() {
	tokPath := flag.String("tokenizer", "", "tokenizer.json")
	corpus := flag.String("corpus", "", "JSON lines of documents")
	passes := flag.Int("passes", 3, "timed passes (the best is reported)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the timed passes here")
	flag.Parse()
	if err := run(*tokPath, *corpus, *passes, *cpuProfile); err != nil {
		fmt.Fprintln(os.Stderr, "tokenizer-bench:", err)
		os.Exit(1)
	}
}

func run(tokPath, corpus string, passes int, cpuProfile string) error {
	tok, err := tokenizer.LoadFile(tokPath)
	if err != nil {
		return err
	}
	f, err := os.Open(corpus)
	if err != nil {
		return err
	}
	defer f.Close()
	var docs []string
	nbytes := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<28)
	for sc.Scan() {
		var s string
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return fmt.Errorf("%s line %d: %w", corpus, len(docs)+1, err)
		}
		docs = append(docs, s)
		nbytes += len(s)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	encode := func() [][]int {
		if runtime.GOMAXPROCS(0) == 1 {
			out := make([][]int, len(docs))
			for i, d := range docs {
				out[i] = tok.Encode(d)
			}
			return out
		}
		return tok.EncodeBatch(docs)
	}
	ids := encode() // warm-up: fills the merge cache, as HF's is after its warm-up
	if cpuProfile != "" {
		pf, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	best, bestCPU := time.Duration(1<<63-1), time.Duration(1<<63-1)
	for range passes {
		start, startCPU := time.Now(), cpuTime()
		encode()
		best = min(best, time.Since(start))
		bestCPU = min(bestCPU, cpuTime()-startCPU)
	}
	h := sha256.New()
	ntok := 0
	var buf [4]byte
	for _, doc := range ids {
		for _, id := range doc {
			binary.LittleEndian.PutUint32(buf[:], uint32(id))
			h.Write(buf[:])
		}
		binary.LittleEndian.PutUint32(buf[:], 0xFFFFFFFF)
		h.Write(buf[:])
		ntok += len(doc)
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"bytes": nbytes, "tokens": ntok, "seconds": best.Seconds(), "cpu_seconds": bestCPU.Seconds(),
		"threads": runtime.GOMAXPROCS(0), "ids_sha256": hex.EncodeToString(h.Sum(nil)),
	})
}

// cpuTime is the user+system CPU time of the process, all threads together.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
