package membership

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// MetaAuth is the metadata key of a registration's credential (Credential).
const MetaAuth = "auth"

// Credential is the credential a backend registers with (meta MetaAuth):
// hex HMAC-SHA256, keyed with the backend token shared by the gateways and
// the backends (gateway --backend-token, backend --admin-token), of the
// service id, the address host as registered ("" when Consul fills in the
// node's) and the port. Bound to the id and address, it cannot be copied
// from one registration to another; without the token, it cannot be made.
func Credential(token, id, host string, port int) string {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("piccolo-backend\x00" + id + "\x00" + host + "\x00" + strconv.Itoa(port)))
	return hex.EncodeToString(mac.Sum(nil))
}

// Verify reports whether got is the Credential of id at host:port under
// token, comparing in constant time.
func Verify(token, id, host string, port int, got string) bool {
	want := Credential(token, id, host, port)
	return hmac.Equal([]byte(want), []byte(got))
}
