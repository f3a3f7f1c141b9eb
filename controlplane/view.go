package controlplane

import (
	"embed"
	"path"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/status"
)

// The live view: a page served under /admin/view/ on the admin listener that
// polls GET /admin/view/state (the figures `piccolo status` prints, computed
// here by status.Live over the last minute) and GET /admin/history, and draws
// each session's DAG with its plan and live figures (docs/operations.md,
// "The live view").
//
// How the browser passes the token: the page (HTML, JS, CSS; embedded, no
// data in them) is served without a token, so a browser can load it; every
// figure comes from /admin/view/state and /admin/history, which ask for the
// admin token like every admin call. The page takes the token from a login
// form or from the URL's fragment (#token=…, which the browser never sends to
// the server, so it is in no access log), keeps it in sessionStorage (gone
// when the tab closes) and sends it as Authorization: Bearer on each fetch.
// No cookie: a cookie would be sent by the browser on cross-site requests
// too, and the admin API's PUT and DELETE would need CSRF tokens.

//go:embed view
var viewFiles embed.FS

// ViewWindow is the span of the live view's figures: the last minute, or
// since the gateway started when it is younger.
const ViewWindow = time.Minute

// viewEvery is how often the sampler gathers the registry for the window's
// start: the window is ViewWindow to ViewWindow+viewEvery long.
const viewEvery = 5 * time.Second

// viewSampler keeps the registry's samples of the last ViewWindow (one every
// viewEvery, gathered by its own goroutine, never on the request path) and
// computes the view's figures between the oldest and a fresh one.
type viewSampler struct {
	gather  prometheus.Gatherer
	started time.Time
	log     *zap.Logger
	stop    chan struct{}
	done    chan struct{}

	mu   sync.Mutex
	ring []*status.Sample // oldest first
	last *status.Sample   // the newest gathered on a state request
}

func newViewSampler(g prometheus.Gatherer, log *zap.Logger) *viewSampler {
	v := &viewSampler{gather: g, started: time.Now(), log: log, stop: make(chan struct{}), done: make(chan struct{})}
	go v.run()
	return v
}

func (v *viewSampler) run() {
	defer close(v.done)
	t := time.NewTicker(viewEvery)
	defer t.Stop()
	for {
		if s := v.sample(); s != nil {
			v.mu.Lock()
			v.ring = append(v.ring, s)
			for len(v.ring) > 1 && s.At().Sub(v.ring[1].At()) >= ViewWindow {
				v.ring = v.ring[1:]
			}
			v.mu.Unlock()
		}
		select {
		case <-v.stop:
			return
		case <-t.C:
		}
	}
}

func (v *viewSampler) sample() *status.Sample {
	fams, err := v.gather.Gather()
	if err != nil && len(fams) == 0 {
		v.log.Warn("live view: gathering the metrics failed", zap.Error(err))
		return nil
	}
	return status.NewSample(time.Now(), fams)
}

// window returns the window's start (nil: since the gateway started, while
// the sampler has not yet covered ViewWindow) and a fresh sample (reused for
// a second, so many open pages gather at most once a second).
func (v *viewSampler) window() (from, now *status.Sample) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.last == nil || time.Since(v.last.At()) >= time.Second {
		if s := v.sample(); s != nil {
			v.last = s
		}
	}
	if len(v.ring) > 0 && v.last != nil && v.last.At().Sub(v.ring[0].At()) >= ViewWindow-viewEvery {
		from = v.ring[0]
	}
	return from, v.last
}

func (v *viewSampler) close() {
	close(v.stop)
	<-v.done
}

// viewState is what GET /admin/view/state answers.
type viewState struct {
	ConfigVersion uint64            `json:"config_version"`
	Window        string            `json:"window"` // "last minute" or "since start"
	Live          status.LiveReport `json:"live"`
	// Sessions' DAG edges from the running config: module → its After.
	Sessions []sessionJSON `json:"sessions"`
}

// viewAsset serves the page's files (GET /admin/view, /admin/view/,
// /admin/view/{file}) and reports whether path was one of them. They are
// served without the token: they hold no data (see the type comment).
func (a *Admin) viewAsset(ctx *fasthttp.RequestCtx, p string) bool {
	switch {
	case p == "/admin/view":
		ctx.Redirect("/admin/view/", fasthttp.StatusMovedPermanently)
		return true
	case p == "/admin/view/":
		p = "index.html"
	case len(p) > len("/admin/view/") && p[:len("/admin/view/")] == "/admin/view/" && p != "/admin/view/state":
		p = p[len("/admin/view/"):]
	default:
		return false
	}
	if !a.allow(ctx, "GET") || !a.queryOK(ctx) {
		return true
	}
	b, err := viewFiles.ReadFile("view/" + p)
	if err != nil || path.Base(p) != p {
		a.fail(ctx, &adminError{status: 404, msg: "no file " + p + " in the live view; open /admin/view/"})
		return true
	}
	switch path.Ext(p) {
	case ".html":
		ctx.SetContentType("text/html; charset=utf-8")
	case ".js":
		ctx.SetContentType("text/javascript; charset=utf-8")
	case ".css":
		ctx.SetContentType("text/css; charset=utf-8")
	}
	// Only its own files: no inline script, nothing from elsewhere.
	ctx.Response.Header.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	ctx.Response.Header.Set("Referrer-Policy", "no-referrer")
	ctx.SetBody(b)
	return true
}

// viewStateHandler answers GET /admin/view/state (token checked by Handle).
func (a *Admin) viewStateHandler(ctx *fasthttp.RequestCtx) {
	if a.view == nil {
		a.fail(ctx, &adminError{status: 501, msg: "the live view has no metrics to read: the gateway wired the admin API without AdminOptions.Gatherer"})
		return
	}
	from, now := a.view.window()
	if now == nil {
		a.fail(ctx, &adminError{status: 503, msg: "the live view could not gather the gateway's metrics; see the gateway's log"})
		return
	}
	snap := a.opts.Store.Current()
	st := viewState{ConfigVersion: snap.Version, Window: "since start", Live: status.Live(a.opts.Plan(), from, now)}
	if from != nil {
		st.Window = "last minute"
	}
	st.Sessions = make([]sessionJSON, len(snap.Config.Sessions))
	for i := range snap.Config.Sessions {
		st.Sessions[i] = toSessionJSON(&snap.Config.Sessions[i])
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	a.writeJSON(ctx, 200, st)
}

// Close stops the live view's sampler (a no-op without one).
func (a *Admin) Close() {
	if a.view != nil {
		a.view.close()
	}
}
