package slack

import (
	"testing"
	"time"
)

func TestDScalesByFactor(t *testing.T) {
	if got, want := D(time.Second), time.Duration(float64(time.Second)*Factor()); got != want {
		t.Fatalf("D(1s) = %v, want %v", got, want)
	}
	if Factor() < 1 || Factor() > 20 {
		t.Fatalf("Factor() = %v, want within [1, 20]", Factor())
	}
}
