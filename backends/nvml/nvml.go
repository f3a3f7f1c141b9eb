package nvml

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrNoGPU is wrapped by Open's error when the machine has no usable NVIDIA GPU
// (no driver library, no device).
var ErrNoGPU = errors.New("no NVIDIA GPU")

// GPU is what Open learned of one GPU.
type GPU struct {
	Index       int
	Name        string // e.g. "NVIDIA A100-SXM4-40GB"
	UUID        string
	MemoryBytes uint64 // total device memory
}

// Telemetry reads the GPUs of one machine. It is a prometheus.Collector.
type Telemetry struct {
	lib     nvml.Interface
	devices []GPU
	handles []nvml.Device
}

var _ prometheus.Collector = (*Telemetry)(nil)

// Open initialises the machine's NVML library (loaded at run time; cgo) and
// lists its devices. See OpenLibrary.
func Open() (*Telemetry, error) { return OpenLibrary(nvml.New()) }

// OpenLibrary initialises lib and lists its devices. When Init fails it calls
// nothing else on lib and returns an error wrapping ErrNoGPU; errors reading a
// device name the device and the NVML error.
func OpenLibrary(lib nvml.Interface) (*Telemetry, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: NVML init: %s", ErrNoGPU, errorString(ret))
	}
	t := &Telemetry{lib: lib}
	fail := func(err error) (*Telemetry, error) {
		lib.Shutdown()
		return nil, err
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fail(fmt.Errorf("%w: NVML device count: %s", ErrNoGPU, errorString(ret)))
	}
	if n == 0 {
		return fail(fmt.Errorf("%w: NVML found no device", ErrNoGPU))
	}
	for i := range n {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fail(fmt.Errorf("NVML device %d: handle: %s", i, errorString(ret)))
		}
		d := GPU{Index: i}
		if d.Name, ret = h.GetName(); ret != nvml.SUCCESS {
			return fail(fmt.Errorf("NVML device %d: name: %s", i, errorString(ret)))
		}
		d.UUID, _ = h.GetUUID()
		if mem, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			d.MemoryBytes = mem.Total
		}
		t.devices = append(t.devices, d)
		t.handles = append(t.handles, h)
	}
	return t, nil
}

// errorString names an NVML return code. Safe even when Init failed: go-nvml
// maps the codes in Go until the library is loaded.
func errorString(ret nvml.Return) string {
	return fmt.Sprintf("%s (code %d)", ret.Error(), int32(ret))
}

// Devices returns the GPUs found at Open, by index.
func (t *Telemetry) Devices() []GPU { return append([]GPU(nil), t.devices...) }

// HardwareType names the hardware type of this machine's GPUs for the config's
// catalog: the first device's name is matched against catalog (case-insensitive,
// as a whole word of the name, the longest catalog name first), so "NVIDIA
// A100-SXM4-40GB" is "a100" in a catalog that has it. With no match the name's
// first word holding a digit is used, lower-cased and cut at '-' ("Tesla
// V100-SXM2-16GB" → "v100", "NVIDIA T4" → "t4"). ok is false when there is no device.
func (t *Telemetry) HardwareType(catalog []string) (name string, ok bool) {
	if len(t.devices) == 0 {
		return "", false
	}
	return HardwareTypeOf(t.devices[0].Name, catalog), true
}

// HardwareTypeOf is HardwareType for a device name.
func HardwareTypeOf(deviceName string, catalog []string) string {
	words := strings.FieldsFunc(strings.ToLower(deviceName), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	sorted := append([]string(nil), catalog...)
	sort.SliceStable(sorted, func(i, j int) bool { return len(sorted[i]) > len(sorted[j]) })
	for _, c := range sorted {
		lc := strings.ToLower(c)
		for _, w := range words {
			if w == lc {
				return c
			}
		}
	}
	for _, f := range strings.Fields(strings.ToLower(deviceName)) {
		if strings.ContainsFunc(f, unicode.IsDigit) {
			if i := strings.IndexByte(f, '-'); i > 0 {
				f = f[:i]
			}
			return f
		}
	}
	return strings.Join(strings.Fields(strings.ToLower(deviceName)), "-")
}

// Close shuts NVML down.
func (t *Telemetry) Close() error {
	if ret := t.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML shutdown: %s", errorString(ret))
	}
	return nil
}

var (
	gpuLabel      = []string{"gpu"}
	descInfo      = prometheus.NewDesc("piccolo_gpu_info", "A GPU of this backend: its NVML name and UUID.", []string{"gpu", "name", "uuid"}, nil)
	descMemTotal  = prometheus.NewDesc("piccolo_gpu_memory_total_bytes", "Device memory of a GPU, in bytes.", gpuLabel, nil)
	descMemUsed   = prometheus.NewDesc("piccolo_gpu_memory_used_bytes", "Device memory in use, in bytes.", gpuLabel, nil)
	descUtil      = prometheus.NewDesc("piccolo_gpu_utilization_ratio", "Share of the last NVML sample period in which a kernel ran on the GPU, 0 to 1.", gpuLabel, nil)
	descMemUtil   = prometheus.NewDesc("piccolo_gpu_memory_utilization_ratio", "Share of the last NVML sample period in which device memory was read or written, 0 to 1.", gpuLabel, nil)
	descPower     = prometheus.NewDesc("piccolo_gpu_power_watts", "Power draw of the GPU, in watts.", gpuLabel, nil)
	telemetryDesc = []*prometheus.Desc{descInfo, descMemTotal, descMemUsed, descUtil, descMemUtil, descPower}
)

// Describe implements prometheus.Collector.
func (t *Telemetry) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range telemetryDesc {
		ch <- d
	}
}

// Collect implements prometheus.Collector: live readings of every device;
// readings that fail are left out.
func (t *Telemetry) Collect(ch chan<- prometheus.Metric) {
	for i, d := range t.devices {
		h := t.handles[i]
		gpu := strconv.Itoa(d.Index)
		ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, gpu, d.Name, d.UUID)
		if mem, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			ch <- prometheus.MustNewConstMetric(descMemTotal, prometheus.GaugeValue, float64(mem.Total), gpu)
			ch <- prometheus.MustNewConstMetric(descMemUsed, prometheus.GaugeValue, float64(mem.Used), gpu)
		}
		if u, ret := h.GetUtilizationRates(); ret == nvml.SUCCESS {
			ch <- prometheus.MustNewConstMetric(descUtil, prometheus.GaugeValue, float64(u.Gpu)/100, gpu)
			ch <- prometheus.MustNewConstMetric(descMemUtil, prometheus.GaugeValue, float64(u.Memory)/100, gpu)
		}
		if mw, ret := h.GetPowerUsage(); ret == nvml.SUCCESS {
			ch <- prometheus.MustNewConstMetric(descPower, prometheus.GaugeValue, float64(mw)/1000, gpu)
		}
	}
}
