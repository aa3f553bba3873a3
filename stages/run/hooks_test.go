package run

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/evolm/evolm/schemas"
)

func TestHooksRunInPriorityOrderAndStopAtAnError(t *testing.T) {
	var h hooks
	var got []string
	add := func(name string, p Priority, err error) {
		h.OnStep(name, p, func(_ context.Context, step int, m *schemas.StepMetrics) error {
			got = append(got, name)
			return err
		})
	}
	add("checkpoint", PriorityCheckpoint, nil)
	add("row", PriorityMetrics, nil)
	add("log", PriorityMetrics, nil)
	stop := errors.New("diverged")
	add("guard", PriorityGuard, stop)
	add("progress", PriorityProgress, nil)
	if err := h.afterStep(context.Background(), 3, &schemas.StepMetrics{}); !errors.Is(err, stop) {
		t.Fatalf("err = %v, want the guard's", err)
	}
	if want := []string{"row", "log", "guard"}; !slices.Equal(got, want) {
		t.Errorf("ran %v, want %v", got, want)
	}
}
