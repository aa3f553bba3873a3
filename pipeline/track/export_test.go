package track

import "time"

// SetIntervals sets the retry backoff bounds and the report interval for a
// test and returns what restores them.
func SetIntervals(retry, report time.Duration) (restore func()) {
	a, b, c := retryMin, retryMax, reportEvery
	retryMin, retryMax, reportEvery = retry, retry, report
	return func() { retryMin, retryMax, reportEvery = a, b, c }
}
