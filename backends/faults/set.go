package faults

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Kinds names every fault, in the order Set.String and the metrics list them.
var Kinds = []string{"refuse", "reset", "hang", "slow", "fail", "malformed", "shared", "slowshare"}

// allowed is the list of fault words for error messages.
const allowed = "refuse, reset, hang, slow=K (K ≥ 1), slowshare=P (0 < P ≤ 1, with slow), fail=P (0 ≤ P ≤ 1), malformed, shared=K (K ≥ 1)"

// MaxSlow is the largest slow factor accepted: beyond it a batch is a hang.
const MaxSlow = 1000

// Set is a backend's active faults; the zero value is none. It is the JSON
// body of /admin/faults.
type Set struct {
	// Refuse: new connections are refused (the listening socket is closed) and
	// open ones are closed; clients see UNAVAILABLE "connection refused".
	Refuse bool `json:"refuse"`
	// Reset: every ModelInfer has its connection cut (TCP RST) before it
	// answers; clients see UNAVAILABLE.
	Reset bool `json:"reset"`
	// Hang: ModelInfer never answers, until the caller's deadline.
	Hang bool `json:"hang"`
	// Slow is the factor k ≥ 1 every batch's duration is multiplied by; 0 (or
	// 1): off.
	Slow float64 `json:"slow"`
	// Fail is the share p of ModelInfer calls answered INTERNAL, 0 ≤ p ≤ 1.
	Fail float64 `json:"fail"`
	// Malformed: every ModelInfer answers outputs of the wrong dimension 0 or
	// byte length.
	Malformed bool `json:"malformed"`
	// Shared is the factor k ≥ 1 a batch's duration is multiplied by when
	// another model started a batch on this backend within SharedWindow
	// (co-location interference, on top of Slow); 0 (or 1): off.
	Shared float64 `json:"shared"`
	// SlowShare is the share p of batches Slow applies to, drawn per batch
	// (a heavy-tailed service time: most batches on time, a share p K times
	// as long); 0 (or 1): every batch.
	SlowShare float64 `json:"slow_share"`
}

// None reports whether s has no fault active.
func (s Set) None() bool {
	s.Slow, s.Shared, s.SlowShare = max(s.Slow, 1), max(s.Shared, 1), 0
	return s == Set{Slow: 1, Shared: 1}
}

// Validate returns an error naming the value out of range and what is allowed.
func (s Set) Validate() error {
	if math.IsNaN(s.Slow) || s.Slow != 0 && (s.Slow < 1 || s.Slow > MaxSlow) {
		return fmt.Errorf("faults: slow %v is out of range; want a factor 1 ≤ k ≤ %d (0: off)", s.Slow, MaxSlow)
	}
	if math.IsNaN(s.Shared) || s.Shared != 0 && (s.Shared < 1 || s.Shared > MaxSlow) {
		return fmt.Errorf("faults: shared %v is out of range; want a factor 1 ≤ k ≤ %d (0: off)", s.Shared, MaxSlow)
	}
	if math.IsNaN(s.SlowShare) || s.SlowShare < 0 || s.SlowShare > 1 {
		return fmt.Errorf("faults: slowshare %v is out of range; want a share 0 < p ≤ 1 of batches slow applies to (0: every batch)", s.SlowShare)
	}
	if s.SlowShare > 0 && s.SlowShare < 1 && s.Slow <= 1 {
		// A share of batches slowed by nothing: a rehearsal that would run
		// with no fault while the operator believes one is on.
		return fmt.Errorf("faults: slowshare %v without slow: slowshare is the share of batches slow=K slows; give slow=K (K > 1) with it", s.SlowShare)
	}
	if math.IsNaN(s.Fail) || s.Fail < 0 || s.Fail > 1 {
		return fmt.Errorf("faults: fail %v is out of range; want a share 0 ≤ p ≤ 1", s.Fail)
	}
	return nil
}

// values returns each kind's setting, in Kinds order: 1 or 0 for the on/off
// faults, k for slow and p for fail (0: off).
func (s Set) values() []float64 {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	slow, shared := s.Slow, s.Shared
	if slow == 1 {
		slow = 0
	}
	if shared == 1 {
		shared = 0
	}
	share := s.SlowShare
	if share == 1 || slow == 0 {
		share = 0
	}
	return []float64{b(s.Refuse), b(s.Reset), b(s.Hang), slow, s.Fail, b(s.Malformed), shared, share}
}

// String lists the active faults in the --fault syntax ("slow=3,fail=0.1"), or
// "none".
func (s Set) String() string {
	var words []string
	for i, v := range s.values() {
		switch {
		case v == 0:
		case Kinds[i] == "slow" || Kinds[i] == "fail" || Kinds[i] == "shared" || Kinds[i] == "slowshare":
			words = append(words, Kinds[i]+"="+strconv.FormatFloat(v, 'g', -1, 64))
		default:
			words = append(words, Kinds[i])
		}
	}
	if len(words) == 0 {
		return "none"
	}
	return strings.Join(words, ",")
}

// Parse reads fault words, each spec one word or several comma-separated:
// refuse, reset, hang, slow=K, fail=P, malformed, shared=K, or none. A word given twice
// keeps the last value. The error names the word and what is allowed.
func Parse(specs []string) (Set, error) {
	var s Set
	for _, spec := range specs {
		for _, word := range strings.Split(spec, ",") {
			word = strings.TrimSpace(word)
			name, value, hasValue := strings.Cut(word, "=")
			switch name {
			case "", "none":
				if hasValue {
					return Set{}, fmt.Errorf("faults: %q takes no value; allowed: %s", word, allowed)
				}
				continue
			case "refuse", "reset", "hang", "malformed":
				if hasValue {
					return Set{}, fmt.Errorf("faults: %q: %s takes no value; allowed: %s", word, name, allowed)
				}
				switch name {
				case "refuse":
					s.Refuse = true
				case "reset":
					s.Reset = true
				case "hang":
					s.Hang = true
				default:
					s.Malformed = true
				}
			case "slow", "fail", "shared", "slowshare":
				v, err := strconv.ParseFloat(value, 64)
				if !hasValue || err != nil {
					return Set{}, fmt.Errorf("faults: %q: %s wants a number, e.g. slow=3 or fail=0.1; allowed: %s", word, name, allowed)
				}
				switch name {
				case "slow":
					s.Slow = v
				case "shared":
					s.Shared = v
				case "slowshare":
					s.SlowShare = v
				default:
					s.Fail = v
				}
			default:
				return Set{}, fmt.Errorf("faults: %q is not a fault; allowed: %s", word, allowed)
			}
		}
	}
	if err := s.Validate(); err != nil {
		return Set{}, err
	}
	return s, nil
}
