// Package dedup is the prompt deduplication stage, `evolm dedup`: it turns
// Tulu 3 preference-mixture files into the prompts table with exact and near
// duplicates removed, plus a dedup_report table.
//
// # Normalization and identity
//
// Normalize: format characters (Cf: zero-width, BOM, bidi controls) removed,
// NFKC, Unicode case folding, NFKC again, whitespace runs to one
// space, ends trimmed. A prompt's prompt_id is the hex of the first 16 bytes
// of the SHA-256 of its normalized text, so it is stable across runs, row
// orders and datasets. Exact duplicates are rows with equal prompt_ids.
//
// # Near duplicates
//
// MinHash-LSH with datatrove's defaults: the normalized text is split into
// words (punctuation and symbols dropped, diacritics removed, as datatrove's
// simplify_text; numbers kept, unlike datatrove, as prompts that differ in
// their numbers ask different things — norm_numbers turns it on), words are
// hashed (FNV-1a) and combined into 5-word shingles, and each shingle hash x
// goes through 14 × 8 = 112 permutations ((a·x + b) mod 2^64) mod (2^61 − 1)
// (datatrove's formula) whose minima form the signature. Each band of 8
// minima hashes to a bucket key; rows sharing a key in any band are
// candidates. With verify (default on), a candidate pair is accepted only if
// the exact Jaccard of the two shingle sets reaches threshold (0.7), which
// removes LSH false positives. Texts of fewer than ngram words have no
// shingles and are only exact-deduplicated (as in datatrove).
//
// # Clusters and the keeper rule
//
// Exact and accepted near pairs are edges of a union-find forest whose root
// is always the smallest row index; connected components are the clusters.
// A cluster keeps its earliest row in input order (files in the order
// given, rows in file order) and drops the rest; the report lists the kept
// prompt_id, the removed prompt_ids, the method ("exact" when every removed
// row has the keeper's normalized text, else "minhash") and the lowest
// shingle Jaccard of a removed row to the keeper.
//
// # Memory
//
// No pass holds the texts. Pass 1 streams the input once (parquet-go typed
// rows, a batch at a time); workers normalize, hash and sign, and one writer
// appends in row order (content hash, row) and (band key, row) records to
// hash-partitioned spill files in a directory of its own under the run's
// _work/dedup (spill-<pid>-<random>: never shared between processes;
// leftovers of a dead run are removed under the stage lock), and each row's
// sorted 32-bit shingle hashes to a shingle file with a fixed-width row
// index. Pass 2 loads one partition at a time (≈ 170 bytes × rows /
// partitions), sorts it and unions equal keys; verification and the final
// similarities read shingle sets back by row. Only rows that end up in a
// cluster are kept in memory (union-find, keepers, similarities, content
// hashes): memory is O(duplicates + partition size), not O(rows).
// Pass 3 streams the input again, one output shard per shard_rows input
// rows, and writes the kept rows through the pipeline's shard writer
// (Env.MapShards: atomic commit, manifest, resume).
//
// # Errors
//
// Bad input — a corrupt file, a missing column, a wrong column type, a null
// id/prompt/source, a prompt with no visible character (empty, or only
// whitespace, format characters and combining marks; ErrBlankPrompt:
// rejected with its row rather than dropped, so a broken
// export is seen), invalid UTF-8, no rows — fails pass 1 with an error
// naming the file, row and column, before any shard is committed. Inputs
// are files, directories or glob patterns (a pattern matching nothing is an
// error naming it). Size parameters are bounded (MaxNGram, MaxHashes for
// bands, band_rows and their product, MaxMaxVerify, MaxWorkers), so an
// absurd value is a config error, not an out-of-memory crash.
package dedup
