package lora

import (
	"fmt"
	"sync"
)

// Switch keeps several adapters of one model, loaded with LoadDetached,
// and puts one of them in the model's slots at a time (Use): the adapters
// share the model's base weights and each holds only its low-rank factors,
// as vLLM's LoRA slots do. With none in use the model computes the base
// model, and its fused inference path stays open. Use before every forward
// pass that needs a given adapter; the passes themselves must not overlap
// (an engine's turns).
type Switch struct {
	mu  sync.Mutex
	cur *Adapter
}

// Use puts a in the slots (nil: the base model) in place of the adapter
// used before.
func (s *Switch) Use(a *Adapter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == a {
		return nil
	}
	if s.cur != nil {
		s.cur.vacate()
		s.cur = nil
	}
	if a == nil {
		return nil
	}
	if err := a.occupy(); err != nil {
		return fmt.Errorf("lora switch: %w", err)
	}
	s.cur = a
	return nil
}

// Drop vacates a if it is in use; call it before closing a.
func (s *Switch) Drop(a *Adapter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == a && a != nil {
		a.vacate()
		s.cur = nil
	}
}
