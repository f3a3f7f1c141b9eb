package arrival

import (
	"fmt"
	"math"
	"time"

	//lint:ignore SA1019 the same seeded source as New's processes (see arrival.go).
	"golang.org/x/exp/rand"
	"gonum.org/v1/gonum/stat/distuv"
)

// MMPP is an on/off Markov-modulated Poisson process, the synthetic bursty load of
// `--arrival mmpp`: the process alternates between a burst state and a quiet state,
// staying in each for an exponentially distributed time (means BurstLength and
// QuietLength), and within a state requests arrive as a Poisson process at that
// state's rate (BurstRate, QuietRate, req/s). It starts quiet. Its long-run mean
// rate is MeanRate.
type MMPP struct {
	BurstRate   float64       // req/s while bursting; > 0
	BurstLength time.Duration // mean time in the burst state; > 0
	QuietRate   float64       // req/s while quiet; ≥ 0 (0: on/off)
	QuietLength time.Duration // mean time in the quiet state; > 0
}

// MeanRate is the long-run mean request rate in req/s:
// (BurstRate·BurstLength + QuietRate·QuietLength) / (BurstLength + QuietLength).
func (m MMPP) MeanRate() float64 {
	on, off := m.BurstLength.Seconds(), m.QuietLength.Seconds()
	return (m.BurstRate*on + m.QuietRate*off) / (on + off)
}

// Validate says which parameter is out of range, and what is allowed.
func (m MMPP) Validate() error {
	switch {
	case !(m.BurstRate > 0) || math.IsInf(m.BurstRate, 0):
		return fmt.Errorf("mmpp burst rate %v req/s: must be a finite number > 0", m.BurstRate)
	case !(m.QuietRate >= 0) || math.IsInf(m.QuietRate, 0):
		return fmt.Errorf("mmpp quiet rate %v req/s: must be a finite number ≥ 0", m.QuietRate)
	case m.BurstLength <= 0:
		return fmt.Errorf("mmpp burst length %v: must be > 0", m.BurstLength)
	case m.QuietLength <= 0:
		return fmt.Errorf("mmpp quiet length %v: must be > 0", m.QuietLength)
	case m.MeanRate() < minMeanRate:
		return fmt.Errorf("mmpp mean rate %v req/s: must be at least %v", m.MeanRate(), minMeanRate)
	}
	return nil
}

// minMeanRate keeps an MMPP's gaps within time.Duration.
const minMeanRate = 1e-6

// mmpp draws gaps from one seeded source: a state's sojourn, then Poisson gaps at
// its rate until one would cross the sojourn's end; by memorylessness the gap
// then restarts from the switch in the other state.
type mmpp struct {
	m     MMPP
	src   rand.Source
	exp   distuv.Exponential // rate 1: scaled per draw
	burst bool
	left  float64 // seconds until the state switches
}

func newMMPP(m MMPP, seed uint64) (*mmpp, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	p := &mmpp{m: m, src: rand.NewSource(seed)}
	p.exp = distuv.Exponential{Rate: 1, Src: p.src}
	p.left = p.exp.Rand() * m.QuietLength.Seconds()
	return p, nil
}

func (p *mmpp) Next() time.Duration {
	gap := 0.0
	for {
		rate, mean := p.m.QuietRate, p.m.BurstLength
		if p.burst {
			rate = p.m.BurstRate
		}
		if rate > 0 {
			if g := p.exp.Rand() / rate; g < p.left {
				p.left -= g
				return seconds(gap + g)
			}
		}
		gap += p.left
		if p.burst {
			mean = p.m.QuietLength
		}
		p.burst = !p.burst
		p.left = p.exp.Rand() * mean.Seconds()
	}
}
