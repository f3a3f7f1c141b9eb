package arrival

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReadTrace(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	for _, tc := range []struct {
		name, text, column string
		want               []time.Duration
	}{
		{"offsets", "0\n0.25\n0.25\n1.5\n", "", ms(0, 250, 250, 1500)},
		{"offsets not from zero", "10.5\n11\n", "", ms(0, 500)},
		{"offsets with blanks and comments", "# recorded 2024\n\n1\n\n2\n", "", ms(0, 1000)},
		{"csv timestamps", "timestamp,model\n2024-03-01 12:00:00,a\n2024-03-01 12:00:00.25,b\n2024-03-01 12:00:01.000001,a\n", "",
			[]time.Duration{0, 250 * time.Millisecond, time.Second + time.Microsecond}},
		{"csv timestamps across midnight", "ts\n2024-03-01 23:59:59.5\n2024-03-02 00:00:00\n", "", ms(0, 500)},
		{"csv seconds, named column", "id,arrival_s\n1,100.0\n2,100.125\n3,102\n", "arrival_s", ms(0, 125, 2000)},
		{"csv quoted fields", "\"model\",\"t\"\n\"a,b\",3\n\"c\",4\n", "t", ms(0, 1000)},
		{"timestamps one a line", "2024-03-01 12:00:00\n2024-03-01 12:00:02\n", "", ms(0, 2000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ReadTrace(strings.NewReader(tc.text), "t.csv", tc.column)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(tr.Offsets, tc.want) {
				t.Errorf("offsets %v, want %v", tr.Offsets, tc.want)
			}
		})
	}
}

func TestReadTraceErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text, column, want string
	}{
		{"empty", "", "", "t.csv: empty trace: no arrivals"},
		{"only comments", "# nothing\n\n", "", "t.csv: empty trace"},
		{"header only", "timestamp,model\n", "", "t.csv: empty trace: a header but no arrivals"},
		{"unparsable timestamp", "ts\n2024-03-01 12:00:00\n2024-03-01 12:00\n", "", `t.csv:3: column "ts": "2024-03-01 12:00" is neither a timestamp YYYY-MM-DD HH:MM:SS[.ffffff] nor a number of seconds`},
		{"unparsable offset", "1\n2\nsoon\n", "", `t.csv:3: value: "soon" is neither a timestamp`},
		{"missing column", "ts,model\n1,a\n", "arrival", `t.csv:1: no column "arrival" in the header; columns: ts, model`},
		{"column without header", "1\n2\n", "ts", `t.csv:1: --trace-column "ts" given, but the file has no header row`},
		{"no header", "1.5,a\n2,b\n", "", `t.csv:1: the first row "1.5,a" is data, not a header`},
		{"backwards", "t\n1\n2\n1.5\n", "", `t.csv:4: column "t": 1.5 goes back 500ms from line 3; a trace must be in time order`},
		{"backwards timestamps", "ts\n2024-03-01 12:00:01\n2024-03-01 12:00:00\n", "", `t.csv:3: column "ts": 2024-03-01 12:00:00 goes back 1s from line 2`},
		{"mixed forms", "ts\n2024-03-01 12:00:01\n5\n", "", `t.csv:3: column "ts": "5" mixes forms: earlier rows are timestamps`},
		{"short row", "ts,model\n1,a\n2\n", "", "t.csv:3: 1 fields, but the first row has 2"},
		{"bad quote", "ts\n\"1\n", "", "t.csv:2: CSV:"},
		{"infinite", "1\ninf\n", "", `t.csv:2: value: "inf" is neither`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadTrace(strings.NewReader(tc.text), "t.csv", tc.column)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestTraceWindowAndReplay(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader("0\n1\n2\n4\n8\n"), "t", "")
	if err != nil {
		t.Fatal(err)
	}
	w, err := tr.Window(1500*time.Millisecond, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, time.Second, 3 * time.Second}
	if !slices.Equal(w.Offsets, want) {
		t.Errorf("skip 1.5s at speed 2: %v, want %v", w.Offsets, want)
	}
	p, err := Spec{Kind: "trace", Trace: w}.New(0)
	if err != nil {
		t.Fatal(err)
	}
	var got []time.Duration
	for range 4 {
		got = append(got, p.Next())
	}
	if !slices.Equal(got, []time.Duration{time.Second, 2 * time.Second, Never, Never}) {
		t.Errorf("replayed gaps %v, want 1s 2s then Never", got)
	}
	if n, r := tr.MeanRate(0); n != 5 || r != 0.5 {
		t.Errorf("whole trace: %d arrivals at %v req/s, want 5 at 0.5", n, r)
	}
	if n, r := tr.MeanRate(3 * time.Second); n != 3 || r != 1 {
		t.Errorf("first 3 s: %d arrivals at %v req/s, want 3 at 1", n, r)
	}
	if r := tr.PeakRate(2*time.Second, 0); r != 1 {
		t.Errorf("peak over 2 s windows %v req/s, want 1 (two arrivals)", r)
	}
	for _, bad := range []struct {
		skip  time.Duration
		speed float64
	}{{0, 0}, {0, math.Inf(1)}, {-time.Second, 1}, {9 * time.Second, 1}} {
		if _, err := tr.Window(bad.skip, bad.speed); err == nil {
			t.Errorf("Window(%v, %v) accepted", bad.skip, bad.speed)
		}
	}
}

// Over a long seeded run the MMPP's rate is its analytic mean, and its bursts show:
// the busiest half second runs far above the mean.
func TestMMPPRateAndBurstiness(t *testing.T) {
	m := MMPP{BurstRate: 500, BurstLength: time.Second, QuietRate: 25, QuietLength: 18 * time.Second}
	if got := m.MeanRate(); math.Abs(got-50) > 1e-9 {
		t.Fatalf("analytic mean %v req/s, want 50", got)
	}
	p, err := Spec{Kind: "mmpp", MMPP: m}.New(7)
	if err != nil {
		t.Fatal(err)
	}
	const horizon = 4000 * time.Second // about 210 burst cycles
	tr := &Trace{}
	for at := time.Duration(0); at < horizon; at += p.Next() {
		tr.Offsets = append(tr.Offsets, at)
	}
	_, mean := tr.MeanRate(horizon)
	if math.Abs(mean/m.MeanRate()-1) > 0.1 {
		t.Errorf("measured rate %.2f req/s, want %.2f ±10%%", mean, m.MeanRate())
	}
	if peak := tr.PeakRate(500*time.Millisecond, 0); peak < 5*mean {
		t.Errorf("peak 0.5 s rate %.1f req/s, want well above the mean %.1f (≥ 5×)", peak, mean)
	}
	// A Poisson process at the same mean has no such peak.
	q, _ := New("poisson", mean, 0, 7)
	flat := &Trace{}
	for at := time.Duration(0); at < horizon; at += q.Next() {
		flat.Offsets = append(flat.Offsets, at)
	}
	if peak := flat.PeakRate(500*time.Millisecond, 0); peak > 3*mean {
		t.Errorf("Poisson peak 0.5 s rate %.1f req/s, want below 3× the mean %.1f", peak, mean)
	}
	a, _ := Spec{Kind: "mmpp", MMPP: m}.New(3)
	b, _ := Spec{Kind: "mmpp", MMPP: m}.New(3)
	for range 1000 {
		if a.Next() != b.Next() {
			t.Fatal("same seed gave different gaps")
		}
	}
}

func TestMMPPBadParameters(t *testing.T) {
	ok := MMPP{BurstRate: 100, BurstLength: time.Second, QuietRate: 10, QuietLength: 5 * time.Second}
	for _, tc := range []struct {
		name string
		edit func(*MMPP)
		want string
	}{
		{"no burst rate", func(m *MMPP) { m.BurstRate = 0 }, "burst rate 0 req/s: must be a finite number > 0"},
		{"negative quiet rate", func(m *MMPP) { m.QuietRate = -1 }, "quiet rate -1 req/s: must be a finite number ≥ 0"},
		{"no burst length", func(m *MMPP) { m.BurstLength = 0 }, "burst length 0s: must be > 0"},
		{"no quiet length", func(m *MMPP) { m.QuietLength = 0 }, "quiet length 0s: must be > 0"},
	} {
		m := ok
		tc.edit(&m)
		if _, err := (Spec{Kind: "mmpp", MMPP: m}).New(1); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	// On/off: no arrivals while quiet, and still the analytic mean.
	m := ok
	m.QuietRate = 0
	p, err := Spec{Kind: "mmpp", MMPP: m}.New(5)
	if err != nil {
		t.Fatal(err)
	}
	n, at := 0, time.Duration(0)
	for ; at < 2000*time.Second; at += p.Next() {
		n++
	}
	if r := float64(n) / at.Seconds(); math.Abs(r/m.MeanRate()-1) > 0.15 {
		t.Errorf("on/off rate %.2f req/s, want %.2f ±15%%", r, m.MeanRate())
	}
}

// ReadTrace reads files from outside: whatever the bytes, it returns a trace in
// time order starting at 0, or an error, never a panic.
func FuzzReadTrace(f *testing.F) {
	for _, s := range []string{"0\n0.5\n1\n", "ts,m\n2024-03-01 12:00:00,a\n2024-03-01 12:00:00.5,b\n", "t\n1\n0\n", "\"a\nb\",c\n", "", "#x\n\n3\n"} {
		f.Add(s, "")
	}
	f.Add("a,b\n1,2\n", "b")
	f.Fuzz(func(t *testing.T, text, column string) {
		tr, err := ReadTrace(strings.NewReader(text), "f", column)
		if err != nil {
			return
		}
		if len(tr.Offsets) == 0 || tr.Offsets[0] != 0 || !slices.IsSorted(tr.Offsets) {
			t.Fatalf("offsets %v: want a non-empty sorted list from 0", tr.Offsets)
		}
	})
}

// Warp replays a unit-rate trace at a changing rate: evenly spaced unit
// arrivals through a rate of 10 req/s for 1 s and 20 req/s for the next
// come 100 ms apart, then 50 ms apart; a bad rate is refused.
func TestWarp(t *testing.T) {
	unit := &Trace{Name: "unit"}
	for i := range 40 {
		unit.Offsets = append(unit.Offsets, time.Duration(i)*time.Second)
	}
	w, err := Warp(unit, func(at time.Duration) float64 {
		if at < time.Second {
			return 10
		}
		return 20
	}, 2*time.Second, "ramp")
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Offsets) != 30 {
		t.Fatalf("%d arrivals; want 30 (10 in the first second, 20 in the second)", len(w.Offsets))
	}
	for i, at := range w.Offsets {
		want := time.Duration(i) * 100 * time.Millisecond
		if i > 10 {
			want = time.Second + time.Duration(i-10)*50*time.Millisecond
		}
		if d := at - want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("arrival %d at %v; want %v", i, at, want)
		}
	}
	if _, err := Warp(unit, func(time.Duration) float64 { return -1 }, time.Second, "bad"); err == nil || !strings.Contains(err.Error(), "rate -1 req/s") {
		t.Errorf("negative rate: %v; want an error naming it", err)
	}
}
