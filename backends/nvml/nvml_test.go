package nvml

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
)

// TestOpenOnThisMachine calls the real NVML: on a machine without a GPU it must
// say so with ErrNoGPU and not kill the process (any NVML call after a failed
// Init would).
func TestOpenOnThisMachine(t *testing.T) {
	tel, err := Open()
	if err == nil {
		t.Logf("this machine has GPUs: %+v", tel.Devices())
		tel.Close()
		return
	}
	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("Open() = %v, want an error wrapping ErrNoGPU", err)
	}
	t.Logf("Open() = %v", err)
}

func TestOpenLibraryNotFoundCallsNothingElse(t *testing.T) {
	// Every other function of this mock is nil: calling one panics.
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	_, err := OpenLibrary(lib)
	if !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "code 12") {
		t.Fatalf("OpenLibrary = %v, want ErrNoGPU naming the NVML code", err)
	}
	if n := len(lib.InitCalls()); n != 1 {
		t.Errorf("Init called %d times, want 1", n)
	}
}

func TestOpenLibraryNoDevice(t *testing.T) {
	lib := dgxa100.NewWithGPUs()
	_, err := OpenLibrary(lib)
	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("OpenLibrary(no devices) = %v, want ErrNoGPU", err)
	}
	if len(lib.ShutdownCalls()) != 1 {
		t.Errorf("Shutdown called %d times after a failed open, want 1", len(lib.ShutdownCalls()))
	}
}

func TestTelemetryDGXA100(t *testing.T) {
	lib := dgxa100.New()
	for i, d := range lib.Devices {
		dev := d.(*server.Device)
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * i), Memory: 5}, nvml.SUCCESS
		}
		if i == 7 { // a device without power readings
			dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		} else {
			dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 250500, nvml.SUCCESS }
		}
	}
	tel, err := OpenLibrary(lib)
	if err != nil {
		t.Fatal(err)
	}
	devs := tel.Devices()
	if len(devs) != 8 || devs[0].Name != "Mock NVIDIA A100-SXM4-40GB" || devs[0].MemoryBytes != 40*1024*1024*1024 {
		t.Fatalf("devices: %d, first %+v", len(devs), devs[0])
	}
	if hw, ok := tel.HardwareType([]string{"v100", "a100", "t4"}); !ok || hw != "a100" {
		t.Errorf("HardwareType = %q %v, want a100", hw, ok)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(tel)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{} // family -> gpu -> value
	for _, f := range fams {
		got[f.GetName()] = map[string]float64{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "gpu" {
					got[f.GetName()][l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	if p := got["piccolo_gpu_power_watts"]; len(p) != 7 || p["0"] != 250.5 {
		t.Errorf("power: %v, want 250.5 W on gpus 0-6 and no series for gpu 7 (not supported)", p)
	}
	if u := got["piccolo_gpu_utilization_ratio"]; len(u) != 8 || u["3"] != 0.3 || u["0"] != 0 {
		t.Errorf("utilisation: %v, want gpu i at i/10", u)
	}
	if m := got["piccolo_gpu_memory_total_bytes"]; len(m) != 8 || m["5"] != 40*1024*1024*1024 {
		t.Errorf("memory total: %v, want 40 GiB each", m)
	}
	if len(got["piccolo_gpu_info"]) != 8 || len(got["piccolo_gpu_memory_used_bytes"]) != 8 {
		t.Errorf("info %v, memory used %v: want 8 series each", got["piccolo_gpu_info"], got["piccolo_gpu_memory_used_bytes"])
	}
	var text bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&text, f); err != nil {
			t.Fatal(err)
		}
	}
	problems, err := promlint.New(&text).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	if err := tel.Close(); err != nil {
		t.Error(err)
	}
}

func TestHardwareTypeOf(t *testing.T) {
	catalog := []string{"v100", "a100", "t4", "cpu-4c"}
	for _, tc := range []struct{ name, want string }{
		{"NVIDIA A100-SXM4-40GB", "a100"},
		{"Tesla V100-SXM2-16GB", "v100"},
		{"Tesla T4", "t4"},
		{"NVIDIA H100 80GB HBM3", "h100"},
		{"NVIDIA GeForce RTX 4090", "4090"},
		{"NVIDIA RTX A6000", "a6000"},
	} {
		if got := HardwareTypeOf(tc.name, catalog); got != tc.want {
			t.Errorf("HardwareTypeOf(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
