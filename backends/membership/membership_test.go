package membership

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	capi "github.com/hashicorp/consul/api"

	"github.com/piccolo-serving/piccolo/api"
)

func TestStatic(t *testing.T) {
	s := Static(
		[]api.Backend{
			{ID: "t4-0", Address: "127.0.0.1:9103", Hardware: "t4"},
			{ID: "gpu-0", Address: "127.0.0.1:9101", Hardware: "v100"},
			{ID: "cpu-0", Address: "127.0.0.1:9102", Hardware: "cpu-4c"},
		},
		[]api.Hardware{{Name: "v100", Price: 3.06}, {Name: "t4", Price: 0.53}},
	)
	want := []Member{
		{ID: "cpu-0", Address: "127.0.0.1:9102", Hardware: "cpu-4c"}, // not in the catalog: price 0
		{ID: "gpu-0", Address: "127.0.0.1:9101", Hardware: "v100", Price: 3.06},
		{ID: "t4-0", Address: "127.0.0.1:9103", Hardware: "t4", Price: 0.53},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var got []Snapshot
	called := make(chan struct{}, 1)
	done := make(chan error)
	go func() {
		done <- s.Watch(ctx, func(s Snapshot) {
			got = append(got, s)
			select {
			case called <- struct{}{}:
			default:
			}
		})
	}()
	<-called // the first call; a second would be a bug the count below catches
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Watch: %v; want nil when ctx ends", err)
	}
	if len(got) != 1 {
		t.Fatalf("Watch called fn %d times; want once", len(got))
	}
	snap := got[0]
	if diff := cmp.Diff(want, snap.Members); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
	if snap.Stale || snap.Err != nil || snap.Source != "static" {
		t.Errorf("Stale %v, Err %v, Source %q; want false, nil, static", snap.Stale, snap.Err, snap.Source)
	}
	if diff := cmp.Diff(map[string]int{"v100": 1, "t4": 1, "cpu-4c": 1}, snap.ByHardware()); diff != "" {
		t.Errorf("ByHardware (-want +got):\n%s", diff)
	}
	if b := snap.Backends(); len(b) != 3 || b[1] != (api.Backend{ID: "gpu-0", Address: "127.0.0.1:9101", Hardware: "v100"}) {
		t.Errorf("Backends() = %+v; want the three, sorted by id", b)
	}
	if m, ok := snap.Member("t4-0"); !ok || m.Price != 0.53 {
		t.Errorf("Member(t4-0) = %+v, %v", m, ok)
	}
	if _, ok := snap.Member("nope"); ok {
		t.Error("Member(nope) found")
	}
}

func TestMetaRoundTrip(t *testing.T) {
	m := Member{ID: "gpu-0", Address: "10.0.0.1:9101", Hardware: "a100", Price: 4.1,
		GPU: "NVIDIA A100-SXM4-40GB", GPUMemoryBytes: 42949672960, Models: []string{"resnet50", "bert"}, TLS: true}
	got, err := memberFromMeta(m.ID, m.Address, m.Meta())
	if err != nil {
		t.Fatal(err)
	}
	m.Models = []string{"bert", "resnet50"} // read back sorted
	if diff := cmp.Diff(m, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	bare := Member{ID: "cpu-0", Address: "10.0.0.2:9101", Hardware: "cpu-4c"}
	if diff := cmp.Diff(map[string]string{"hardware": "cpu-4c", "price": "0"}, bare.Meta()); diff != "" {
		t.Errorf("Meta of a member without GPU or models (-want +got):\n%s", diff)
	}
	if !bare.CanRun("anything") || m.CanRun("ssd") || !m.CanRun("bert") {
		t.Error("CanRun: want true for an unknown model list, else membership in Models")
	}
}

func TestMemberFromBadMeta(t *testing.T) {
	for _, tc := range []struct {
		name string
		meta map[string]string
		want string
	}{
		{"no hardware", map[string]string{"price": "1"}, `meta "hardware" is missing`},
		{"bad price", map[string]string{"hardware": "v100", "price": "cheap"}, `price="cheap": want a number ≥ 0`},
		{"negative price", map[string]string{"hardware": "v100", "price": "-1"}, `price="-1"`},
		{"bad memory", map[string]string{"hardware": "v100", "gpu_memory": "16GB"}, `gpu_memory="16GB": want bytes`},
		{"bad tls", map[string]string{"hardware": "v100", "tls": "yes"}, `tls="yes": want true or false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := memberFromMeta("x", "h:1", tc.meta)
			if !errors.Is(err, ErrBadMember) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want ErrBadMember containing %q", err, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	good := Member{ID: "gpu-0", Address: "127.0.0.1:9101", Hardware: "v100", Price: 3}
	for _, tc := range []struct {
		name string
		edit func(*Member)
		want string
	}{
		{"empty id", func(m *Member) { m.ID = "" }, "id is empty"},
		{"slash in id", func(m *Member) { m.ID = "a/b" }, `id "a/b"`},
		{"no port", func(m *Member) { m.Address = "127.0.0.1" }, "want host:port"},
		{"port 0", func(m *Member) { m.Address = "127.0.0.1:0" }, "port must be 1..65535"},
		{"no hardware", func(m *Member) { m.Hardware = "" }, "hardware is empty"},
		{"negative price", func(m *Member) { m.Price = -1 }, "price -1"},
		{"comma in model", func(m *Member) { m.Models = []string{"a,b"} }, `model "a,b"`},
		{"too many models", func(m *Member) { m.Models = []string{strings.Repeat("m", 600)} }, "at most 512"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := good
			tc.edit(&m)
			err := m.validate()
			if !errors.Is(err, ErrBadMember) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("validate = %v; want ErrBadMember containing %q", err, tc.want)
			}
			if _, err := Register(context.Background(), "127.0.0.1:1", m, ""); !errors.Is(err, ErrBadMember) {
				t.Errorf("Register = %v; want ErrBadMember before contacting Consul", err)
			}
		})
	}
	if err := good.validate(); err != nil {
		t.Errorf("valid member: %v", err)
	}
}

func TestSnapshotOfEntries(t *testing.T) {
	entry := func(id, node, addr string, port int, meta map[string]string) *capi.ServiceEntry {
		return &capi.ServiceEntry{Node: &capi.Node{Node: node, Address: "10.0.0.9"},
			Service: &capi.AgentService{ID: id, Address: addr, Port: port, Meta: meta}}
	}
	s := snapshotOf([]*capi.ServiceEntry{
		entry("b", "n1", "", 9102, map[string]string{"hardware": "t4"}), // address from the node
		entry("a", "n1", "10.0.0.1", 9101, map[string]string{"hardware": "v100", "price": "3.06"}),
		entry("a", "n2", "10.0.0.2", 9101, map[string]string{"hardware": "v100"}), // duplicate id
		entry("c", "n1", "10.0.0.3", 9103, map[string]string{}),                   // no hardware
	}, "")
	want := []Member{
		{ID: "a", Address: "10.0.0.1:9101", Hardware: "v100", Price: 3.06},
		{ID: "b", Address: "10.0.0.9:9102", Hardware: "t4"},
	}
	if diff := cmp.Diff(want, s.Members, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
	for _, w := range []string{`"a" at 10.0.0.2:9101: registered on nodes "n1" and "n2"`, `"c" at 10.0.0.3:9103: meta "hardware" is missing`} {
		if s.Err == nil || !strings.Contains(s.Err.Error(), w) {
			t.Errorf("Err = %v; want it to name %s", s.Err, w)
		}
	}
}

func TestBackoff(t *testing.T) {
	max := 2 * time.Second
	for n := 1; n <= 20; n++ {
		d := Backoff(n, max)
		ceil := min(50*time.Millisecond<<min(n-1, 10), max)
		if d < ceil/2 || d > ceil {
			t.Errorf("Backoff(%d) = %v; want in [%v, %v]", n, d, ceil/2, ceil)
		}
	}
}
