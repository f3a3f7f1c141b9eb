package kserve

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHostileClients is the hostile-client suite of docs/security.md over
// loopback, the cases the other tests do not already cover
// (TestRequestLimits: 100,000 inputs, duplicate outputs, the caps;
// TestPanicIsAnswered500AndServingGoesOn; TestHalfSentRequestsAreClosed...;
// TestConnectionsPerAddressAreCapped; TestAdminApart): eight concurrent gzip
// bombs declaring a 256 MB tensor are all refused and the budget is given
// back, and 2,000 randomly mutated bodies over one keep-alive connection get
// no 5xx and no dropped connection, the gateway answering a normal request
// after each case.
func TestHostileClients(t *testing.T) {
	ts := startServersWith(t, ServerOptions{Version: "test", MaxBodyBytes: 16 << 20, MaxInflightBytes: 32 << 20})
	url := ts.url + "/v2/models/echo/infer"
	alive := func(after string) {
		t.Helper()
		if code, _, body := post(t, url, []byte(goodBody)); code != 200 {
			t.Fatalf("after %s: a normal request got %d %s", after, code, body)
		}
	}

	t.Run("eight gzip bombs", func(t *testing.T) {
		head := []byte(`{"inputs":[{"name":"x","datatype":"FP64","shape":[32000000],"data":[`)
		raw := append(head, bytes.Repeat([]byte("0,"), (16<<20)/2-len(head)/2-8)...)
		bomb := gzipped(t, raw)
		var wg sync.WaitGroup
		codes := make([]int, 8)
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("POST", url, bytes.NewReader(bomb))
				req.Header.Set("Content-Encoding", "gzip")
				resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				codes[i] = resp.StatusCode
			}()
		}
		wg.Wait()
		for i, c := range codes {
			if c != 400 && c != 413 && c != 503 {
				t.Errorf("bomb %d: %d; want 400, 413 or 503", i, c)
			}
		}
		if n := ts.server.budget.used.Load(); n != 0 {
			t.Errorf("%d bytes of the budget held after every bomb was answered", n)
		}
		alive("eight gzip bombs")
	})

	t.Run("2,000 mutated bodies over keep-alive", func(t *testing.T) {
		seeds := [][]byte{[]byte(goodBody),
			[]byte(`{"id":"q","inputs":[{"name":"x","shape":[2,2],"datatype":"INT32","data":[[1,2],[3,4]]}],"outputs":[{"name":"x","parameters":{"binary_data":false}}],"parameters":{"priority":1,"timeout":100000}}`)}
		c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		rnd := rand.New(rand.NewPCG(1, 2))
		const chars = `{}[],:"0123456789.-eE ntrufals\`
		counts := map[int]int{}
		for i := range 2000 {
			b := append([]byte(nil), seeds[rnd.IntN(len(seeds))]...)
			for range 1 + rnd.IntN(8) {
				p := rnd.IntN(len(b) + 1)
				switch rnd.IntN(3) {
				case 0:
					if len(b) > 0 {
						p = min(p, len(b)-1)
						b = append(b[:p], b[p+1:]...)
					}
				case 1:
					b = append(b[:p], append([]byte{byte(rnd.IntN(256))}, b[p:]...)...)
				default:
					if len(b) > 0 {
						b[min(p, len(b)-1)] = chars[rnd.IntN(len(chars))]
					}
				}
			}
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(c, "POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(b))
			c.Write(b)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("body %d %q: the connection dropped: %v", i, b, err)
			}
			var sink bytes.Buffer
			sink.ReadFrom(resp.Body)
			resp.Body.Close()
			counts[resp.StatusCode]++
			if resp.StatusCode >= 500 {
				t.Errorf("body %d %q: %d %s", i, b, resp.StatusCode, sink.Bytes())
			}
			if resp.Close {
				t.Fatalf("body %d %q: the gateway closed the keep-alive connection", i, b)
			}
		}
		t.Logf("2,000 mutated bodies: %v", counts)
		alive("2,000 mutated bodies")
	})
}
