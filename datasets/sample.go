package datasets

//go:generate go run ./internal/gensample -out sample/tulu3_sample.parquet

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Sample categories, as written in the sample's source column
// ("evolm-sample/<category>").
const (
	CatChat        = "chat"
	CatMath        = "math"
	CatCode        = "code"
	CatInstruction = "instruction_following"
	CatScience     = "science"
	CatRoleplay    = "roleplay"
)

// SampleSourcePrefix starts the source of every sample row.
const SampleSourcePrefix = "evolm-sample/"

// SamplePath is where the committed copy of the sample lives, relative to the
// repository root. `go generate ./datasets` rewrites it; TestSampleFileIsCurrent checks it matches Sample().
const SamplePath = "datasets/sample/tulu3_sample.parquet"

// PlantKind says how a planted duplicate relates to its original.
type PlantKind string

const (
	// PlantExact rows equal their original after normalization (NFKC, case
	// folding, whitespace collapse): copies, case, whitespace and
	// compatibility-character variants.
	PlantExact PlantKind = "exact"
	// PlantNear rows are small edits of their original (punctuation, a word
	// added, removed or changed): word 5-gram Jaccard similarity >= 0.7.
	PlantNear PlantKind = "near"
)

// Plant records one planted duplicate of the sample.
type Plant struct {
	Row  int       // row index of the duplicate
	Of   int       // row index of the original it duplicates (Of < Row)
	Kind PlantKind // exact (after normalization) or near
	How  string    // what was changed
}

// SampleSet is the sample dataset with its ground truth.
type SampleSet struct {
	Rows   []TuluRow
	Plants []Plant
	// FarGroups lists groups of row indices whose prompts share a frame word
	// for word but ask different things; dedup must keep every one of them.
	FarGroups [][]int
}

// exact variants: a function of the original text.
var exactVariants = []struct {
	orig string
	how  string
	f    func(string) string
}{
	{"Why is the sky blue during the day but red at sunset?", "copy", same},
	{"Write a haiku about the first snow of winter.", "copy", same},
	{"Solve for x: 3x + 7 = 22.", "copy", same},
	{"How do I undo the last git commit but keep my changes?", "copy", same},
	{"What is the etiquette for tipping at restaurants in Japan?", "copy", same},
	{"Act as a sports commentator narrating a snail race.", "copy", same},
	{"How do vaccines train the immune system?", "copy", same},
	{"What is the difference between `==` and `===` in JavaScript?", "copy", same},
	{"How do black holes form?", "upper case", strings.ToUpper},
	{"What's the difference between a latte and a flat white?", "lower case", strings.ToLower},
	{"Explain the difference between mitosis and meiosis.", "title case", titleCase},
	{"Pretend you are a cat explaining to your human why you need to be fed at 4 a.m.", "upper case", strings.ToUpper},
	{"Write a limerick about a cat who learns to code.", "lower case", strings.ToLower},
	{"How can I get better at remembering people's names?", "leading and trailing whitespace", func(s string) string { return "  \n" + s + " \t\n" }},
	{"Implement binary search in Java and explain its time complexity.", "doubled spaces", func(s string) string { return strings.ReplaceAll(s, " ", "  ") }},
	{"Why does ice float on water?", "tabs and newlines between words", func(s string) string { return strings.Replace(strings.Replace(s, " ", "\t", 1), " ", "\n", 1) }},
	{"You are a dragon who guards a library instead of gold. Greet a nervous visitor.", "line break between sentences", func(s string) string { return strings.Replace(s, ". ", ".\n\n", 1) }},
	{"What is the sum of the first 100 positive odd numbers?", "fullwidth digits", func(s string) string { return strings.NewReplacer("1", "１", "0", "０").Replace(s) }},
	{"Solve the system of equations: 2x + y = 7 and x - y = 2.", "fullwidth plus and equals", func(s string) string { return strings.NewReplacer("+", "＋", "=", "＝").Replace(s) }},
	{"What is the difference between weather and climate?", "fullwidth letters", func(s string) string { return strings.NewReplacer("weather", "ｗｅａｔｈｅｒ").Replace(s) }},
	{"How do I read a large CSV file in pandas without running out of memory?", "fi/ff ligatures", func(s string) string { return strings.NewReplacer("file", "ﬁle").Replace(s) }},
	{"Give me a few ideas for a rainy Sunday afternoon with two kids under ten.", "no-break spaces", func(s string) string { return strings.ReplaceAll(s, " ", "\u00a0") }},
	{"Act as a medieval herald announcing the arrival of a foreign king.", "ideographic space and upper case", func(s string) string { return strings.ToUpper(strings.Replace(s, " ", "\u3000", 2)) }},
	{"How do lithium-ion batteries store energy?", "copy, twice", same},
	{"How do lithium-ion batteries store energy?", "mixed case and spaces", func(s string) string { return "  how do LITHIUM-ION batteries   store energy?" }},
	{"Answer in one word only: what is the capital of Australia?", "fullwidth colon and question mark", func(s string) string { return strings.NewReplacer(":", "：", "?", "？").Replace(s) }},
	{"How can I make a Python class iterable?", "copy", same},
	{"What causes the tides in the ocean?", "copy", same},
}

// near variants: hand-made small edits of an original.
var nearVariants = []struct{ orig, variant, how string }{
	{"What are some good ways to stay motivated when working from home?",
		"What are some good ways to stay motivated when working from home",
		"dropped question mark"},
	{"How should I prepare for a salary negotiation next week?",
		"How should I prepare for a salary negotiation next week? Thanks!",
		"appended thanks"},
	{"What should I pack for a week-long hiking trip in the Scottish Highlands in May?",
		"What should I pack for a week long hiking trip in the Scottish Highlands in May??",
		"hyphen and punctuation"},
	{"Help me plan a small surprise party for my partner's fortieth birthday.",
		"Please help me plan a small surprise party for my partner's fortieth birthday.",
		"prefixed please"},
	{"What are the pros and cons of leasing a car versus buying one?",
		"What are the pros and cons of leasing a car versus buying one outright?",
		"added a word at the end"},
	{"A bag contains 4 red and 6 blue marbles. If two marbles are drawn without replacement, what is the probability that both are red?",
		"A bag contains 4 red and 6 blue marbles. If two marbles are drawn without replacement, what is the probability that both are red? Explain your reasoning.",
		"appended an instruction"},
	{"Two trains leave stations 300 km apart at the same time and travel toward each other at 70 km/h and 80 km/h. When do they meet?",
		"Two trains leave stations 300 km apart at the same time and travel toward each other at 70 km/h and 80 km/h. When do they meet? Show your work.",
		"appended an instruction"},
	{"A store marks up a jacket by 40% and then offers a 25% discount. What is the net percentage change in price?",
		"A store marks up a jacket by 40%, and then offers a 25% discount; what is the net percentage change in price",
		"punctuation only"},
	{"Prove by induction that 1 + 2 + ... + n = n(n + 1)/2.",
		"Prove by induction that 1 + 2 + ... + n = n(n+1)/2",
		"spacing inside the formula"},
	{"Write a Python function that checks whether a string is a palindrome, ignoring punctuation and case.",
		"Please write a Python function that checks whether a string is a palindrome, ignoring punctuation and case.",
		"prefixed please"},
	{"Write a SQL query that returns the top three customers by total order value in 2023.",
		"Write an SQL query that returns the top three customers by total order value in 2023.",
		"article changed"},
	{"My React component re-renders on every keystroke and the page feels slow. How can I fix that?",
		"My React component re-renders on every keystroke and the page feels slow. How can I fix this?",
		"last word changed"},
	{"Write a Dockerfile for a small Flask application that listens on port 8000.",
		"Write a Dockerfile for a small Flask application that listens on port 8000, please.",
		"appended please"},
	{"Why is my Node.js server not responding after I call an async function without await?",
		"Why is my Node.js server not responding after I call an async function without await? Any ideas?",
		"appended a question"},
	{"Summarize the following paragraph in one sentence: The city council met on Tuesday to discuss the new bike lanes. Residents raised concerns about parking, while cyclists praised the plan for improving safety. The council will vote next month.",
		"Summarize the following paragraph in one sentence: The city council met on Tuesday to discuss the new bike lanes. Residents raised concerns about parking, while cyclists praised the plan for improving road safety. The council will vote next month.",
		"one word inserted in a long prompt"},
	{"Write a two-paragraph review of an imaginary restaurant. The second paragraph must start with the word 'However'.",
		"Write a two-paragraph review of an imaginary restaurant. The second paragraph must start with the word \"However\".",
		"quote style"},
	{"Make a to-do list for moving house, grouped under the headings 'One month before', 'One week before' and 'Moving day'.",
		"Make a to-do list for moving house, grouped under the headings 'One month before', 'One week before', and 'Moving day'.",
		"Oxford comma"},
	{"Give three arguments for and three arguments against a four-day work week, formatted as a table.",
		"Give three arguments for and three arguments against a four-day work week, formatted as a markdown table.",
		"inserted a word near the end"},
	{"What is the theory of plate tectonics, and what evidence supports it?",
		"What is the theory of plate tectonics and what evidence supports it",
		"punctuation only"},
	{"Give me a packing list for a beach weekend as a numbered list with no more than ten items.",
		"Give me a packing list for a beach weekend as a numbered list with no more than ten items, please.",
		"appended please"},
	{"Write a job advertisement for a part-time librarian. Include a section titled 'Requirements'.",
		"Write a job advertisement for a part-time librarian. Include a section titled 'Requirements'. Thanks.",
		"appended thanks"},
	{"You are a pirate captain who has just lost your ship in a card game. Tell your crew the news.",
		"You are a pirate captain who has just lost your ship in a card game. Tell your crew the bad news.",
		"inserted an adjective at the end"},
	{"You are a Victorian-era explorer writing a letter home from the Amazon.",
		"You are a Victorian era explorer writing a letter home from the Amazon!",
		"hyphen and punctuation"},
	{"You are a time traveler from the year 3000 visiting a supermarket today. React to what you see.",
		"You are a time traveler from the year 3000 visiting a supermarket today... React to what you see!",
		"punctuation only"},
	{"You are a fairy godmother whose magic only works on kitchen appliances. Help Cinderella get to the ball.",
		"You are a fairy godmother whose magic only works on kitchen appliances. Help Cinderella get to the ball tonight.",
		"appended a word"},
}

func same(s string) string { return s }

func titleCase(s string) string {
	w := strings.Fields(s)
	for i, x := range w {
		w[i] = strings.ToUpper(x[:1]) + x[1:]
	}
	return strings.Join(w, " ")
}

type catPrompt struct{ cat, text string }

// basePrompts returns every distinct prompt with its category, interleaving
// the categories round-robin, and the far groups as indices into that list.
func basePrompts() ([]catPrompt, [][]int) {
	cats := []struct {
		cat     string
		prompts []string
	}{
		{CatChat, chatPrompts},
		{CatMath, mathPrompts},
		{CatCode, codePrompts},
		{CatInstruction, instructionPrompts},
		{CatScience, sciencePrompts},
		{CatRoleplay, roleplayPrompts},
	}
	var out []catPrompt
	for i := 0; ; i++ {
		added := false
		for _, c := range cats {
			if i < len(c.prompts) {
				out = append(out, catPrompt{c.cat, c.prompts[i]})
				added = true
			}
		}
		if !added {
			break
		}
	}
	var far [][]int
	group := func(cat string, texts []string) {
		var g []int
		for _, t := range texts {
			g = append(g, len(out))
			out = append(out, catPrompt{cat, t})
		}
		far = append(far, g)
	}
	var t []string
	for _, c := range codeTemplate {
		t = append(t, fmt.Sprintf("Write a %s function that %s. Include a short docstring and two example calls.", c.Lang, c.Task))
	}
	group(CatCode, t)
	t = nil
	for _, m := range mathTemplate {
		t = append(t, fmt.Sprintf("Find the area of a %s with %s, and explain each step of your calculation.", m.Shape, m.Given))
	}
	group(CatMath, t)
	t = nil
	for _, r := range roleplayTemplate {
		t = append(t, fmt.Sprintf("You are %s. Stay in character for the whole conversation and keep your answers short. %s", r.Persona, r.Task))
	}
	group(CatRoleplay, t)
	t = nil
	for _, in := range instructionTemplate {
		t = append(t, fmt.Sprintf("Write %s about %s. %s", in.Form, in.Topic, in.Rule))
	}
	group(CatInstruction, t)
	return out, far
}

// Sample builds the sample set: about 300 prompts across chat, math, code,
// instruction following, science and roleplay in the Tulu 3 layout, with
// planted exact and near duplicates placed after their originals in a fixed
// pseudo-random order. It is deterministic. Rows carry the prompt as the user
// turn of chosen and rejected and no assistant turn: EVOLM trains on prompts
// and the policy writes its own responses.
func Sample() (SampleSet, error) {
	base, far := basePrompts()
	index := map[string]int{}
	for i, p := range base {
		if j, dup := index[p.text]; dup {
			return SampleSet{}, fmt.Errorf("sample: base prompts %d and %d are identical: %q", j, i, p.text)
		}
		index[p.text] = i
	}
	type plant struct {
		of       int
		text     string
		kind     PlantKind
		how      string
		category string
	}
	var plants []plant
	for _, v := range exactVariants {
		i, ok := index[v.orig]
		if !ok {
			return SampleSet{}, fmt.Errorf("sample: exact variant of unknown prompt %q", v.orig)
		}
		plants = append(plants, plant{i, v.f(v.orig), PlantExact, v.how, base[i].cat})
	}
	for _, v := range nearVariants {
		i, ok := index[v.orig]
		if !ok {
			return SampleSet{}, fmt.Errorf("sample: near variant of unknown prompt %q", v.orig)
		}
		plants = append(plants, plant{i, v.variant, PlantNear, v.how, base[i].cat})
	}
	// Spread the plants among the last third of the rows, deterministically,
	// always after their original.
	rng := rand.New(rand.NewPCG(2605, 3871))
	rng.Shuffle(len(plants), func(i, j int) { plants[i], plants[j] = plants[j], plants[i] })

	var set SampleSet
	pos := make([]int, len(base)) // base index -> row
	emit := func(cat, text string) int {
		row := len(set.Rows)
		id := fmt.Sprintf("evolm-sample-%03d", row)
		msgs := []Message{{Role: "user", Content: text}}
		set.Rows = append(set.Rows, TuluRow{
			ID: id, Prompt: text, Source: SampleSourcePrefix + cat,
			Chosen: msgs, Rejected: slices.Clone(msgs),
		})
		return row
	}
	cut := len(base) * 2 / 3
	for i := range cut {
		pos[i] = emit(base[i].cat, base[i].text)
	}
	next := 0
	for i := cut; i < len(base); i++ {
		pos[i] = emit(base[i].cat, base[i].text)
		// After each base row, emit the plants whose original is already out.
		for next < len(plants) && plants[next].of <= i && rng.IntN(3) == 0 {
			p := plants[next]
			set.Plants = append(set.Plants, Plant{Row: emit(p.category, p.text), Of: pos[p.of], Kind: p.kind, How: p.how})
			next++
		}
	}
	for ; next < len(plants); next++ {
		p := plants[next]
		set.Plants = append(set.Plants, Plant{Row: emit(p.category, p.text), Of: pos[p.of], Kind: p.kind, How: p.how})
	}
	for _, g := range far {
		rows := make([]int, len(g))
		for k, i := range g {
			rows[k] = pos[i]
		}
		set.FarGroups = append(set.FarGroups, rows)
	}
	return set, nil
}

// CategoryOf maps a Tulu 3 source name (or a sample source) to a prompt
// category: chat, math, code, instruction_following, science, roleplay or,
// when nothing matches, "other". It looks for well-known substrings of the
// published mixture's sources (e.g. "ifeval", "tulu-3-sft-personas-math",
// "codefeedback", "sciriff", "wildchat").
func CategoryOf(source string) string {
	if c, ok := strings.CutPrefix(source, SampleSourcePrefix); ok {
		return c
	}
	s := strings.ToLower(source)
	switch {
	case containsAny(s, "ifeval", "if_", "-if-", "instruction_following", "instruction-following", "persona-if", "ifdata"):
		return CatInstruction
	case containsAny(s, "math", "gsm", "numina", "algebra"):
		return CatMath
	case containsAny(s, "code", "coding", "python", "evol_codealpaca", "oss-instruct"):
		return CatCode
	case containsAny(s, "sciriff", "science", "scienceqa"):
		return CatScience
	case containsAny(s, "roleplay", "role-play", "character"):
		return CatRoleplay
	case containsAny(s, "wildchat", "ultrafeedback", "sharegpt", "oasst", "chat", "flan", "helpsteer", "tulu", "no_robots", "aya"):
		return CatChat
	}
	return "other"
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// WriteSample writes the sample set as Parquet to path (via a temp file and
// rename, so a reader never sees a partial file).
func WriteSample(path string) (SampleSet, error) {
	set, err := Sample()
	if err != nil {
		return SampleSet{}, err
	}
	var buf bytes.Buffer
	if err := WriteParquet(&buf, set.Rows); err != nil {
		return SampleSet{}, fmt.Errorf("sample %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return SampleSet{}, fmt.Errorf("sample %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return SampleSet{}, fmt.Errorf("sample %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return SampleSet{}, fmt.Errorf("sample %s: %w", path, err)
	}
	return set, nil
}
