package demo

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/internal/ocrsamples"
	"github.com/piccolo-serving/piccolo/loadgen"
	"github.com/piccolo-serving/piccolo/profiler"
)

// OCRAccuracy is what the OCR session read from its test images, each sent once.
type OCRAccuracy struct {
	Set                 string // "test" (ocrsamples.Samples) or "hard" (ocrsamples.HardSamples)
	Images, ImagesExact int
	Words, WordsRead    int // words in the images; words read exactly
	// Refused is the images admission still refused after accuracyTries
	// tries (a host too busy for the plan); they count in neither Images nor Words.
	Refused int
}

// accuracyTries is how many times ocrAccuracy sends an image that admission
// refuses (429: the host's backends are slower than their profiles, and the
// queue cannot finish it in time), accuracyBackoff apart.
const (
	accuracyTries   = 10
	accuracyBackoff = 500 * time.Millisecond
)

// ocrSet is the test set an OCR session is sent: the hard set
// (ocrsamples.HardSamples) for a session with model variants, whose accuracies
// and target are word accuracies on that set (docs/variants.md), else the test
// images (ocrsamples.Samples).
func ocrSet(s *api.Session) (name string, samples []ocrsamples.Sample) {
	for i := range s.Modules {
		if len(s.Modules[i].Variants) > 0 {
			return "hard", ocrsamples.HardSamples()
		}
	}
	return "test", ocrsamples.Samples()
}

// isOCR reports whether a session takes images: a source module runs
// ocr-pre, alone or as the first step of a fused chain (ocr-pre+ocr-det...:
// the session as the planner fused it, planner.Fuse).
func isOCR(s *api.Session) bool {
	for _, i := range s.Sources() {
		if first, _, _ := strings.Cut(s.Modules[i].Model, "+"); first == "ocr-pre" {
			return true
		}
	}
	return false
}

// ocrImages renders samples as loadgen payloads (BYTES "image").
func ocrImages(samples []ocrsamples.Sample) ([]loadgen.Payload, error) {
	var out []loadgen.Payload
	for _, s := range samples {
		png, err := ocrsamples.EncodePNG(s)
		if err != nil {
			return nil, err
		}
		p, err := loadgen.ImagePayload("image", png)
		if err != nil {
			return nil, err
		}
		p.Source = s.Name
		out = append(out, p)
	}
	return out, nil
}

// ocrAccuracy sends every image of the session's set (ocrSet) once to it over
// gRPC and counts the words read exactly.
func ocrAccuracy(ctx context.Context, addr string, session *api.Session) (*OCRAccuracy, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	client := inference.NewGRPCInferenceServiceClient(conn)
	set, samples := ocrSet(session)
	acc := &OCRAccuracy{Set: set}
	for _, s := range samples {
		png, err := ocrsamples.EncodePNG(s)
		if err != nil {
			return nil, err
		}
		var resp *inference.ModelInferResponse
		for try := 1; ; try++ {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			resp, err = client.ModelInfer(rctx, &inference.ModelInferRequest{
				ModelName:        session.Name,
				Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "image", Datatype: "BYTES", Shape: []int64{1}}},
				RawInputContents: [][]byte{lengthPrefixed(png)},
			})
			cancel()
			if status.Code(err) != codes.ResourceExhausted || try == accuracyTries {
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(accuracyBackoff):
			}
		}
		if status.Code(err) == codes.ResourceExhausted {
			acc.Refused++
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
		texts, err := profiler.ResponseTexts(resp)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
		want := s.Words()
		read := profiler.WordAccuracy(want, strings.Fields(strings.Join(texts, " ")))
		acc.Images++
		acc.Words += len(want)
		acc.WordsRead += read
		if read == len(want) {
			acc.ImagesExact++
		}
	}
	return acc, nil
}

// lengthPrefixed is one BYTES element in raw form: a 4-byte little-endian length,
// then the bytes.
func lengthPrefixed(b []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b))), b...)
}
