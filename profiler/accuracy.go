package profiler

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/backends"
)

// LabelsFile is the labels file of a labelled set (docs/variants.md): in the
// set's directory, one line per image, `<file name>\t<text>`, the text's lines
// joined by one space. Blank lines and lines starting with # are skipped.
// (internal/ocrsamples.WriteSet writes one for the test images.)
const LabelsFile = "labels.tsv"

// Labelled is one image of a labelled set and the text it shows.
type Labelled struct {
	File string // path of the image
	Text string
}

// LoadLabelled reads dir/labels.tsv. Errors name the file and line.
func LoadLabelled(dir string) ([]Labelled, error) {
	path := filepath.Join(dir, LabelsFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: labelled set: %v (want a directory of images and %s: <file>\\t<text> per line)", ErrBadOptions, err, LabelsFile)
	}
	var out []Labelled
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		l := sc.Text()
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		file, text, ok := strings.Cut(l, "\t")
		if !ok || file == "" || strings.ContainsAny(file, "/\\") {
			return nil, fmt.Errorf("%w: %s:%d: want <file name>\\t<text>, the file in the same directory; got %q", ErrBadOptions, path, line, l)
		}
		out = append(out, Labelled{File: filepath.Join(dir, file), Text: text})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s lists no image", ErrBadOptions, path)
	}
	return out, nil
}

// AccuracyOptions says what MeasureAccuracy measures: the model Model on the
// KServe v2 gRPC server Target (a gateway session such as ocr, or a backend
// model that reads images and answers text), on the labelled set in Dir.
type AccuracyOptions struct {
	Target, Model, Dir string
	// InputName is the BYTES input the image is sent as (default "image");
	// OutputName the BYTES output holding the text read (default "text").
	InputName, OutputName string
	// Timeout is the per-image call timeout (default DefaultTimeout).
	Timeout time.Duration
}

// AccuracyResult is what MeasureAccuracy found: exact-match word accuracy
// Matched/Words (each word read counts for at most one labelled word, in any
// order) and the images read exactly.
type AccuracyResult struct {
	Images, ExactImages int
	Words, Matched      int
}

// Accuracy returns Matched/Words.
func (r AccuracyResult) Accuracy() float64 {
	if r.Words == 0 {
		return 0
	}
	return float64(r.Matched) / float64(r.Words)
}

// MeasureAccuracy sends every image of the labelled set, one request each, and
// compares the text answered with the labels. An unreachable target wraps
// backends.ErrBackendUnavailable; a failed call names the image.
func MeasureAccuracy(ctx context.Context, o AccuracyOptions) (AccuracyResult, error) {
	if o.Target == "" || o.Model == "" {
		return AccuracyResult{}, fmt.Errorf("%w: the target and the model are required", ErrBadOptions)
	}
	if o.InputName == "" {
		o.InputName = "image"
	}
	if o.OutputName == "" {
		o.OutputName = "text"
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	set, err := LoadLabelled(o.Dir)
	if err != nil {
		return AccuracyResult{}, err
	}
	conn, err := grpc.NewClient(o.Target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return AccuracyResult{}, fmt.Errorf("%w: %s: %v", backends.ErrBackendUnavailable, o.Target, err)
	}
	defer conn.Close()
	client := inference.NewGRPCInferenceServiceClient(conn)
	var res AccuracyResult
	for _, l := range set {
		img, err := os.ReadFile(l.File)
		if err != nil {
			return res, fmt.Errorf("%w: %v", ErrBadOptions, err)
		}
		raw := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(img)), uint32(len(img)))
		cctx, cancel := context.WithTimeout(ctx, o.Timeout)
		resp, err := client.ModelInfer(cctx, &inference.ModelInferRequest{
			ModelName:        o.Model,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: o.InputName, Datatype: "BYTES", Shape: []int64{1}}},
			RawInputContents: [][]byte{append(raw, img...)},
		})
		cancel()
		if err != nil {
			return res, fmt.Errorf("%s: %s: %w", o.Target, filepath.Base(l.File), err)
		}
		texts, err := ResponseTexts(renamed(resp, o.OutputName))
		if err != nil {
			return res, fmt.Errorf("%s: %w", filepath.Base(l.File), err)
		}
		var got []string
		for _, t := range texts {
			got = append(got, strings.Fields(t)...)
		}
		want := strings.Fields(l.Text)
		m := WordAccuracy(want, got)
		res.Images++
		res.Words += len(want)
		res.Matched += m
		if m == len(want) && len(got) == len(want) {
			res.ExactImages++
		}
	}
	return res, nil
}

// renamed returns resp with its output called name renamed to "text", the name
// ResponseTexts reads.
func renamed(resp *inference.ModelInferResponse, name string) *inference.ModelInferResponse {
	if name == "text" {
		return resp
	}
	out := &inference.ModelInferResponse{RawOutputContents: resp.GetRawOutputContents()}
	for _, o := range resp.GetOutputs() {
		c := &inference.ModelInferResponse_InferOutputTensor{Name: o.GetName(), Datatype: o.GetDatatype(), Shape: o.GetShape()}
		if c.Name == name {
			c.Name = "text"
		} else if c.Name == "text" {
			c.Name = "text (not read)"
		}
		out.Outputs = append(out.Outputs, c)
	}
	return out
}

// SetAccuracy writes accuracy into every profile of model (on hardware, or on
// any hardware when hardware is "") of the config YAML doc and returns the new
// document; comments and the other content are kept. It fails when doc has no
// such profile.
func SetAccuracy(doc []byte, model, hardware string, accuracy float64) ([]byte, error) {
	if !(accuracy >= 0 && accuracy <= 1) {
		return nil, fmt.Errorf("%w: accuracy %v: want 0 to 1", ErrBadOptions, accuracy)
	}
	root, err := parseYAML(doc)
	if err != nil {
		return nil, err
	}
	set := 0
	if profiles := yamlValue(root.Content[0], "profiles"); profiles != nil {
		for _, p := range profiles.Content {
			m, h := yamlValue(p, "model"), yamlValue(p, "hardware")
			if m == nil || m.Value != model || (hardware != "" && (h == nil || h.Value != hardware)) {
				continue
			}
			v := fmt.Sprintf("%.4g", accuracy)
			if a := yamlValue(p, "accuracy"); a != nil {
				a.Value, a.Tag = v, "!!float"
			} else {
				// After hardware, as the loader lists the keys.
				at := len(p.Content)
				for i := 0; i+1 < len(p.Content); i += 2 {
					if p.Content[i].Value == "hardware" {
						at = i + 2
					}
				}
				kv := []*yaml.Node{{Kind: yaml.ScalarNode, Value: "accuracy"}, {Kind: yaml.ScalarNode, Tag: "!!float", Value: v}}
				p.Content = append(p.Content[:at], append(kv, p.Content[at:]...)...)
			}
			set++
		}
	}
	if set == 0 {
		on := ""
		if hardware != "" {
			on = " on hardware " + hardware
		}
		return nil, fmt.Errorf("%w: no profile of model %s%s in the file: profile its durations first", ErrBadOptions, model, on)
	}
	return encodeYAML(&root)
}

// ParseJoint parses --joint's MODULE=VARIANT,... into a map. Errors name the
// malformed pair and what is allowed.
func ParseJoint(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		mod, model, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || mod == "" || model == "" {
			return nil, fmt.Errorf("%w: --joint %q: want MODULE=VARIANT pairs separated by commas, such as det=ocr-det-320,rec=ocr-rec-w240", ErrBadOptions, pair)
		}
		if _, dup := out[mod]; dup {
			return nil, fmt.Errorf("%w: --joint: module %s named twice: name each module once", ErrBadOptions, mod)
		}
		out[mod] = model
	}
	return out, nil
}

// SetJointAccuracy writes accuracy as the joint accuracy of the variant
// combination variants (module → model) into session of the config YAML doc
// (its joint_accuracy list: the entry for the same combination is replaced,
// else one is added) and returns the new document; comments and the other
// content are kept. It fails when doc has no such session; the loader checks
// the combination against the session's modules when the config is loaded
// (the file may hold the session without the profiles it needs).
func SetJointAccuracy(doc []byte, session string, variants map[string]string, accuracy float64) ([]byte, error) {
	if !(accuracy >= 0 && accuracy <= 1) {
		return nil, fmt.Errorf("%w: accuracy %v: want 0 to 1", ErrBadOptions, accuracy)
	}
	root, err := parseYAML(doc)
	if err != nil {
		return nil, err
	}
	var s *yaml.Node
	if sessions := yamlValue(root.Content[0], "sessions"); sessions != nil {
		for _, n := range sessions.Content {
			if name := yamlValue(n, "name"); name != nil && name.Value == session {
				s = n
			}
		}
	}
	if s == nil {
		return nil, fmt.Errorf("%w: no session %s in the file: --model names the session served", ErrBadOptions, session)
	}
	want := api.JointKey(variants)
	entry := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	vs := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	for _, mod := range slices.Sorted(maps.Keys(variants)) {
		vs.Content = append(vs.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: mod}, &yaml.Node{Kind: yaml.ScalarNode, Value: variants[mod]})
	}
	entry.Content = []*yaml.Node{
		{Kind: yaml.ScalarNode, Value: "variants"}, vs,
		{Kind: yaml.ScalarNode, Value: "accuracy"}, {Kind: yaml.ScalarNode, Tag: "!!float", Value: fmt.Sprintf("%.4g", accuracy)},
	}
	list := yamlValue(s, "joint_accuracy")
	if list == nil {
		list = &yaml.Node{Kind: yaml.SequenceNode}
		s.Content = append(s.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "joint_accuracy"}, list)
	}
	replaced := false
	for i, e := range list.Content {
		var got struct {
			Variants map[string]string `yaml:"variants"`
		}
		if e.Decode(&got) == nil && api.JointKey(got.Variants) == want {
			list.Content[i], replaced = entry, true
		}
	}
	if !replaced {
		list.Content = append(list.Content, entry)
	}
	return encodeYAML(&root)
}

// parseYAML parses a config file's YAML doc into its node tree, keeping
// comments; an empty or malformed document is ErrBadOptions.
func parseYAML(doc []byte) (yaml.Node, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return root, fmt.Errorf("%w: %v", ErrBadOptions, err)
	}
	if len(root.Content) == 0 {
		return root, fmt.Errorf("%w: the file is empty", ErrBadOptions)
	}
	return root, nil
}

// encodeYAML writes root back as YAML with the loader's two-space indent.
func encodeYAML(root *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// yamlValue returns the value of key in the mapping m; nil when m is not a
// mapping or has no such key.
func yamlValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// WordAccuracy compares the recognized words with the expected ones, both in
// reading order, and returns how many expected words were read exactly: each
// recognized word matches at most one expected word (multiset intersection), so
// order between lines does not matter but every word counts once.
func WordAccuracy(want, got []string) (matched int) {
	left := map[string]int{}
	for _, w := range got {
		left[w]++
	}
	for _, w := range want {
		if left[w] > 0 {
			left[w]--
			matched++
		}
	}
	return matched
}

// ResponseTexts returns the elements of a gateway response's BYTES output "text",
// the recognised lines of the OCR session (none when the image had no text: the
// recognition modules were skipped).
func ResponseTexts(resp *inference.ModelInferResponse) ([]string, error) {
	for i, o := range resp.GetOutputs() {
		if o.GetName() != "text" {
			continue
		}
		if o.GetDatatype() != "BYTES" || i >= len(resp.GetRawOutputContents()) {
			return nil, fmt.Errorf("output text is %s with %d raw contents; want BYTES in raw_output_contents", o.GetDatatype(), len(resp.GetRawOutputContents()))
		}
		data := resp.GetRawOutputContents()[i]
		var out []string
		for off := 0; off < len(data); {
			if off+4 > len(data) {
				return nil, fmt.Errorf("output text: truncated element at byte %d", off)
			}
			l := int(binary.LittleEndian.Uint32(data[off:]))
			if off+4+l > len(data) {
				return nil, fmt.Errorf("output text: element of %d bytes runs past the data", l)
			}
			out = append(out, string(data[off+4:off+4+l]))
			off += 4 + l
		}
		return out, nil
	}
	return nil, nil
}
