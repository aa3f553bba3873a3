package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// corpus is the varied hand-picked corpus of the parity test; the expected
// ids come from the reference, never from this file.
var corpus = []string{
	"",
	"Hello, world!",
	"The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll see, I'd say they're fine & you've won.",
	"DON'T SHOUT: IT'S, WE'LL, THEY'RE, I'M, I'D, YOU'VE; ma'ſ 'Ll 'RE",
	"it'ſx it'Sx it'\u212ax IT'LLy we'VEr",
	"  leading spaces and trailing spaces   ",
	"tabs\tin\t\tthe\tmiddle\t",
	"line one\nline two\r\nline three\n\n\nafter blank lines\n",
	"trailing newline with spaces   \n   \n",
	"mixed \t \n \r\n\t  whitespace runs \u00a0\u2003\u3000 unicode spaces\u0085next",
	"numbers: 0 1 12 123 1234 12345 3.14159 -42 1e-9 1,000,000 ٣٤٥ ৩৪ ⅣⅫ ½ ²³",
	"2024-01-15T10:30:00Z 192.168.0.1 0xDEADBEEF 0b1010",
	"中文分词测试：我们今天去公园散步，天气很好。",
	"日本語のテキストです。カタカナとひらがな、漢字。",
	"한국어 텍스트입니다. 안녕하세요!",
	"Ελληνικά, Русский текст, עברית, العربية, हिन्दी, ไทย",
	"def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
	"func main() {\n\tfmt.Println(\"hi\")\n\tfor i := 0; i < 10; i++ {\n\t\tx += i\n\t}\n}\n",
	"```python\nimport numpy as np\nx = np.zeros((3, 4))  # comment\n```",
	"if (a && b || !c) { return a->b[0] <= c::d; } // ===> !== ?? ... ---",
	"emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇺🇸 🧑🏿‍🚀 1️⃣",
	"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
	"<think>\nLet me think step by step.\n</think>\n\nThe answer is 42.",
	"<|endoftext|><|endoftext|>text<|im_end|>x<tool_call>{\"name\": \"f\"}</tool_call>",
	"partial specials: <|im_start <|im_end| <think </think <|endoftext",
	"<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>    pass",
	"combining: e\u0301 a\u0308 o\u0302\u0323 A\u030a \u1100\u1161\u11a8 q\u0307\u0323",
	"already composed: é ä ộ Å 각",
	"excluded compositions: \u0958 \u2adc \u0344 \u0340 \u212b \u2126",
	"new marks in Go's tables: a\u0898b \u1ac1\u0301 x\u0301\u1ac1 \U00011f41",
	"new letters and digits: \U00011f04\U00011f05 \U0001e4d0\U0001e4d1 \U00011f50\U00011f51 \U0001d2c0",
	"unassigned: \u0378 \U000e0080 \U0010fffd \ue000",
	"control chars: \x00\x01\x1c\x1d\x1e\x1f\x7f end",
	"URL https://example.com/path?q=1&r=two#frag and email a.b@c.org",
	"JSON {\"criteria\": [{\"criterion\": \"Is correct\", \"weight\": 0.5}]}",
	strings.Repeat(" ", 50) + "x" + strings.Repeat("\n", 10) + strings.Repeat("\t", 7),
	strings.Repeat("a", 300),
	strings.Repeat("ab", 200),
	strings.Repeat("a", 20000) + strings.Repeat(" ", 5000) + "x" + strings.Repeat("!", 3000),
	strings.Repeat("\u0301", 40) + "e" + strings.Repeat("\u0316\u0301", 20),
	"o" + strings.Repeat("\u0301\u0323\u0345\u0334\u05b0", 2000),
}

// atoms the fuzzer draws from, by kind.
var fuzzAtoms = [][]string{
	// ASCII words, digits, punctuation
	{"a", "b", "Z", "the", "The", "HELLO", "world", "x_1", "0", "7", "42", "3.14", "-", "'", "\"", "'s", "'T", "'re", "'VE", "'m", "'ll", "'D", "'ſ", ".", ",", "!", "?", "...", "(", ")", "{", "}", "[", "]", "<", ">", "/", "\\", "#", "@", "$", "%", "^", "&", "*", "=", "+", "|", "~", "`", ";", ":"},
	// whitespace
	{" ", " ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", " \n", "\t\t", "\u00a0", "\u2003", "\u3000", "\u0085", "\u1680", "\u200b", "\u2028", "\u2029", "\x1c", "\x1f", "\v", "\f"},
	// scripts
	{"中", "文", "字", "の", "カ", "한", "국", "Ω", "ж", "ש", "ع", "ह", "ि", "ไ", "ท", "ย", "ß", "ẞ", "İ", "ı", "ǅ", "ﬁ", "Ⅻ", "٣", "৪", "①", "½", "²"},
	// emoji and joiners
	{"😀", "👍", "🏽", "\u200d", "\ufe0f", "👨", "👩", "👧", "🏳", "🌈", "🇺", "🇸", "⃣", "❤", "🧑", "🚀", "\U0001faf8"},
	// combining marks, old and new, and composable/decomposable letters
	{"\u0301", "\u0308", "\u0323", "\u0302", "\u0316", "\u0345", "\u0334", "\u05b0", "\u064b", "\u093c", "\u0898", "\u08ca", "\u1ac1", "\u1dfa", "\u07fd", "\U00011f41", "\U0001e4ec", "e", "A", "é", "Å", "\u1100", "\u1161", "\u11a8", "\uac00", "\u0958", "\u0344", "\u0340", "\u212b", "\U00011935", "\U00011930"},
	// letters/numbers new since the reference's Unicode, unassigned, private use
	{"\U00011f04", "\U00011f12", "\U0001e4d0", "\U0001e030", "\U00031350", "\U00011f50", "\U0001d2c0", "\U0001e4f0", "\u0378", "\u0870", "\U0001fafa", "\U000e0080", "\ue000", "\U0010fffd", "\U0002b739"},
	// added tokens, whole and partial
	{"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|fim_pad|>", "<|im_", "<|im_end", "<thin", "|>", "<|", "<|im_start|>assistant\n"},
}

// fuzzStrings returns n deterministic random strings mixing the atoms.
func fuzzStrings(seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	out := make([]string, 0, n)
	var b strings.Builder
	for len(out) < n {
		b.Reset()
		// Bias each string towards a couple of kinds so runs form.
		k1, k2 := rng.IntN(len(fuzzAtoms)), rng.IntN(len(fuzzAtoms))
		for range rng.IntN(24) {
			var pool []string
			switch p := rng.IntN(10); {
			case p < 4:
				pool = fuzzAtoms[k1]
			case p < 7:
				pool = fuzzAtoms[k2]
			default:
				pool = fuzzAtoms[rng.IntN(len(fuzzAtoms))]
			}
			a := pool[rng.IntN(len(pool))]
			if rng.IntN(12) == 0 {
				a = strings.Repeat(a, 2+rng.IntN(8))
			}
			b.WriteString(a)
		}
		if rng.IntN(50) == 0 { // a random code point anywhere in Unicode
			r := rune(rng.IntN(0x110000))
			if utf8.ValidRune(r) {
				b.WriteRune(r)
			}
		}
		if rng.IntN(100) == 0 { // a long run of combining marks
			b.WriteString(strings.Repeat("\u0301\u0316", 16+rng.IntN(10)))
		}
		out = append(out, b.String())
	}
	return out
}

// compositionStrings covers every canonical composition in Go's tables:
// each rune's full decomposition, alone, after a consonant, and with an
// extra mark of a lower and a higher combining class.
func compositionStrings() []string {
	var out []string
	for r := rune(0x80); r <= 0x10FFFF; r++ {
		if r >= 0xD800 && r < 0xE000 {
			continue
		}
		d := norm.NFD.PropertiesString(string(r)).Decomposition()
		if d == nil {
			continue
		}
		out = append(out, fmt.Sprintf("%s|x%s|%s\u0316|%s\u0345", d, d, d, d))
	}
	return out
}
