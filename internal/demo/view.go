package demo

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
)

// adminToken is the demo gateway's admin token, which turns on its admin API
// and live view (/admin/view/): $PICCOLO_ADMIN_TOKEN when set (own), else a
// random one made for this run. It reaches the gateway in its environment,
// not its arguments, which other users of the host can read.
func adminToken() (token string, own bool, err error) {
	if t := os.Getenv("PICCOLO_ADMIN_TOKEN"); t != "" {
		return t, true, nil
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", false, fmt.Errorf("demo: make an admin token: %w", err)
	}
	return hex.EncodeToString(b), false, nil
}

// viewURL is the live view's address for the demo's output: with a token the
// demo made, the token in the URL's fragment (the page reads it there, and a
// browser never sends a fragment to the server); with the user's own, none:
// the page asks for it.
func viewURL(base, token string, own bool) string {
	if own {
		return base + "/admin/view/   (sign in with $PICCOLO_ADMIN_TOKEN)"
	}
	return base + "/admin/view/#token=" + token
}
