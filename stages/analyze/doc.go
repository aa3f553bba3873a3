// Package analyze computes rubric-evolution statistics (the paper's
// "Rubric evolution" analysis) by two sets of definitions: the official EVOLM
// script's (the default) and evolm's richer classifier.
//
// `evolm analyze rubrics` reads a run's rubrics table and writes, per
// (phase, step), both tables — rubric_stats_official and rubric_stats, one
// shard each — and prints the one its definitions key names (official or
// evolm). `evolm analyze trend` generates rubrics for a fixed prompt set from
// a list of checkpoints and tabulates the official statistics per
// checkpoint (see "Trend" below).
//
// # Official definitions (OfficialRubricStats)
//
// As stellalisy/EvoLM scripts/eval/rubric_aggregate_stats.py defines them,
// on the generator's raw output (raw_text):
//
//   - criteria: <think>…</think> removed; the span from the first '{' to the
//     brace closing it (counted naively) parsed as JSON, its "criteria" list;
//     if that fails, the regex fallback's "criterion": "…", "weight": <n>
//     pairs (OfficialCriteria);
//   - label_only_pct: criteria of at most 40 characters (code points);
//   - specific_pct: criteria matching \d+\.?\d*|= |equals |formula|equation|
//     code|pattern|exact|verbatim, case-insensitive;
//   - constraint_pct: criteria matching \bavoid\w*\b|\bexclud\w*\b|\bkeyword\b|
//     \bmust not\b|\bshould not\b|\bdo not\b|\bprohibit\b|\brestrict\b|
//     \bforbid\w*\b, case-insensitive;
//   - criteria_count and avg_criterion_len (characters).
//
// Each is computed per rubric (percent of its criteria; a rubric without
// criteria, invalid JSON included, counts 0 for each), averaged over the
// rubrics of a prompt (the item: a prompt, or a pair in the rubric phase),
// then over prompts. The official aggregate has one rubric per prompt, where
// both averages agree.
//
// Python's re reads these patterns with Unicode semantics, and the port keeps
// them: \d is any decimal digit (Nd, so "٣" is a number and "²" is not), \w
// and \b use Python's word characters (letters, numeric characters, _;
// combining marks are not), and IGNORECASE also matches İ and ı for i, ſ for
// s and the Kelvin sign for k. Go's RE2 \d, \w and \b are ASCII, so the port
// tests boundaries itself and folds İ and ı before matching. Lengths count
// code points, as Python's len. TestOfficialMatchesPython checks the port
// against the definitions run in Python (scripts/rubric_stats_reference.py)
// on generated rubrics. Remaining differences: the two Unicode databases'
// versions (characters new in one of them); where the official script raises
// (a "criteria" that is null or not a list, an entry that is not an object,
// a criterion that is not a string, weights that are not numbers, JSON NaN
// or Infinity), the port counts a non-list as no criteria and such an entry
// as an empty criterion, and reads NaN/Infinity as invalid JSON (the regex
// fallback); weights are not used.
//
// # Trend (`evolm analyze trend`, stage analyze-trend)
//
// For each checkpoint of stages.analyze-trend.checkpoints (HF checkpoint
// directories of the policy / rubric generator for the torch backend, served
// model names for openai) the rubric generator of roles.rubric_generator, with
// its model replaced by the checkpoint, writes one rubric per prompt of a
// fixed set with the run's rubric prompt, sampled as the official
// qualitative_eval.py does: temperature 0.6, top_p 0.95 (keys eval_temperature,
// eval_top_p: not the role's training sampling), max_tokens from
// roles.rubric_generator.max_tokens; every
// checkpoint samples a prompt with the same seed. The prompt set is the
// first limit (100) prompts of the input files (a prompts table in
// Parquet, or JSONL lines with a "question"), in the files' order or, with
// order: seeded, in an order fixed by the seed and the prompt ids. Outputs:
// trend_rubrics (one shard per checkpoint, ckpt_index=NNN; committed
// checkpoints are skipped on a rerun) and rubric_trend (one row per
// checkpoint: the official statistics), printed to stdout.
//
// # evolm's classifier (Classify)
//
// The table rubric_stats (rubric_stats/part-00000.parquet) holds, per
// (phase, step):
//
//   - format_rate: share of rubric rows with R_format = 1;
//   - abstract_share, concrete_share, constraint_share: share of criteria in
//     each class (below), over every criterion that parsed;
//   - criteria_per_rubric: criteria per rubric whose criteria parsed;
//   - mean_criterion_chars: mean criterion length in characters (runes);
//   - weight_concentration: share of rubrics (with criteria) in which one
//     criterion has weight ≥ 0.5.
//
// The stage streams the rubrics shards; its memory grows with the number of
// steps, not of rows. A run without committed rubrics shards is an error
// naming the run and the table.
//
// # Classification rules (Classify)
//
// The text is whitespace-collapsed. A "Label: description" criterion is
// judged by its description (by its label when the description is empty).
// Trailing punctuation is dropped. Then:
//
// Constraint: the text contains a constraint cue, as a whole word,
// case-insensitive: must, must not, should not, shall not, never, do not,
// does not, avoid(s), at most, at least, no more/fewer/less/longer than,
// fewer than, exactly, only, without, limit(ed) to, refrain(s), exclude(s),
// forbid(den), prohibit(ed), strictly, under <n>, within <n>, maximum of,
// minimum of, required to, not exceed. A plain "should" is a requirement,
// not a constraint.
//
// Concrete (carries an expected value): any of
//
//   - a digit, after removing numbers that quantify a constraint ("at most
//     100 words", "under 3 sentences", "between 2 and 4": limits, not values);
//   - quoted text: "…", “…”, ‘…’, `…`, or '…' not inside a word ("user's" is
//     no quote);
//   - an outright value: "the (final|correct) answer/result/solution/value/
//     output is|of|equals|should be|must be", "answer of", "equals", "is
//     equal to", or a math symbol = ≈ ≤ ≥ < > ^ √ ∑ ∫;
//   - a named entity: a capitalized word that does not start a sentence
//     (after . ! ? or :) and is not a generic rubric word (Paris, Python,
//     Treaty of Versailles).
//
// Abstract (a label with no content): neither constraint nor concrete, no
// predicate (a verb, modal, copula or manner adverb from a closed list: is,
// has, includes, mentions, explains, uses, provides, correctly …), at most
// six words, and either every word generic (quality dimensions such as
// accuracy, clarity, helpfulness, relevance, coherence; rubric nouns such as
// response, answer, code, user, instructions; function words) or at most
// three words ("Emotional resonance"). So "Accuracy", "Clarity and
// conciseness", "Overall quality of the response" are abstract; "Explains the
// reasoning clearly" (a predicate) and "Accuracy: states the boiling point of
// water at sea level" (a description) are not.
//
// The classes answer "what does the criterion say", not "is it a good
// criterion": a criterion may be both concrete and constraint ("Uses at most
// 2 quotes from 'Hamlet'"), or none of the three ("Explains why the sky is
// blue").
package analyze
