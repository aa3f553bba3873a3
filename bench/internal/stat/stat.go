// Package stat holds what the Go benchmark programs (bench/judge,
// bench/grpo, bench/dist) report repeated runs with: the median, the
// min / median / max spread and the machine's load average.
package stat

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// Median is the median of xs (the mean of the middle two for an even
// count); xs is not modified.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Spread formats min / median / max of xs, each with format.
func Spread(xs []float64, format string) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	return fmt.Sprintf(format+" / "+format+" / "+format, s[0], Median(s), s[len(s)-1])
}

// LoadAvg returns /proc/loadavg's three load averages ("?" where
// unreadable).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
