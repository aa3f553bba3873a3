// Package analyze computes rubric-evolution statistics (the
// paper's "Rubric evolution" analysis): `evolm analyze rubrics` reads a run's rubrics table
// and writes, per (phase, step), the table rubric_stats
// (rubric_stats/part-00000.parquet) and prints it:
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
