package track

import "time"

// SetIntervals sets the retry backoff bounds and the report interval for a
// test and returns what restores them.
func SetIntervals(retry, report time.Duration) (restore func()) {
	a, b, c := retryMin, retryMax, reportEvery
	retryMin, retryMax, reportEvery = retry, retry, report
	return func() { retryMin, retryMax, reportEvery = a, b, c }
}

// SetStuckWait sets how long a stopped worker's write may take, for a test,
// and returns what restores it.
func SetStuckWait(d time.Duration) (restore func()) {
	old := stuckWait
	stuckWait = d
	return func() { stuckWait = old }
}
