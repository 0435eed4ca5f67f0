package origin

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/waitroom/waitroom/origin/ledger"
)

// Gate devices (docs/api.md §11, docs/origin.md "the gate"): each device
// the operator registers has a token of its own, bound to one gate of one
// event, so a lost device is revoked alone, its scans name its gate
// whatever its body says, and it admits its event's tickets only. The
// shared ORIGIN_GATE_TOKEN keeps working beside them.

// deviceTokenPrefix starts every device token, so one is told from the
// shared gate token and found by secret scanners.
const deviceTokenPrefix = "gd."

// deviceSecretBytes is the length of a token's random secret.
const deviceSecretBytes = 32

// newDeviceToken makes a device's token, "gd.<device id>.<secret>", and
// the hash of its secret, which is all the ledger keeps.
func newDeviceToken() (id, token string, hash []byte) {
	id = uuid.Must(uuid.NewV7()).String()
	secret := make([]byte, deviceSecretBytes)
	_, _ = rand.Read(secret) // never fails (crypto/rand)
	s := base64.RawURLEncoding.EncodeToString(secret)
	sum := sha256.Sum256([]byte(s))
	return id, deviceTokenPrefix + id + "." + s, sum[:]
}

// parseDeviceToken splits a device token into its device id and secret.
func parseDeviceToken(token string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(token, deviceTokenPrefix)
	if !ok {
		return "", "", false
	}
	id, secret, ok = strings.Cut(rest, ".")
	if !ok || secret == "" {
		return "", "", false
	}
	// Only the id as the registration spelled it: uuid.Parse also takes
	// spellings the ledger's uuid type does not (urn:uuid:…), and a token
	// is not another token for being spelled otherwise.
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		return "", "", false
	}
	return id, secret, true
}

// gateCaller is who scans: a registered device (its id, gate, event and
// when it was registered), or the holder of the shared gate token (device
// "", the rest zero).
type gateCaller struct {
	device, gate string
	event        int64
	since        time.Time
}

var errGateDisabled = errorResponse(http.StatusServiceUnavailable, "gate_disabled",
	"this origin has no gate: it issues no tickets, or neither ORIGIN_GATE_TOKEN nor a gate device is set up")

// gateAuth checks the request's gate token: the shared one, or a device's
// not revoked, read from the ledger on every request so that a revocation
// holds from the next request on at every origin node. It answers the
// request itself when the token is refused.
func (s scansAPI) gateAuth(w http.ResponseWriter, r *http.Request) (gateCaller, bool) {
	if s.verifier == nil {
		writeResponse(w, errGateDisabled)
		return gateCaller{}, false
	}
	got := bearerToken(r)
	if isToken(got, s.cfg.GateToken) {
		return gateCaller{}, true
	}
	if id, secret, ok := parseDeviceToken(got); ok {
		cred, err := s.ledger.GateCredential(r.Context(), id)
		switch {
		case err == nil:
			sum := sha256.Sum256([]byte(secret))
			if subtle.ConstantTimeCompare(sum[:], cred.SecretHash) == 1 {
				return gateCaller{device: id, gate: cred.Gate, event: cred.Event, since: cred.CreatedAt}, true
			}
		case !errors.Is(err, ledger.ErrNotFound):
			s.log.Warn("gate device credential not read", "device", id, "error", err)
			writeResponse(w, errUnavailable)
			return gateCaller{}, false
		}
	}
	if s.cfg.GateToken == "" {
		// Closed rather than refusing: nobody could have scanned.
		devices, err := s.ledger.AnyGateDevice(r.Context())
		switch {
		case err != nil:
			writeResponse(w, errUnavailable)
			return gateCaller{}, false
		case !devices:
			writeResponse(w, errGateDisabled)
			return gateCaller{}, false
		}
	}
	unauthorized(w, "gate")
	return gateCaller{}, false
}

// deviceJSON is <gate device> of docs/api.md §11.
type deviceJSON struct {
	ID   string `json:"id"`
	Gate string `json:"gate"`
	// Event is null for a device registered before devices had an event
	// (revoked by migration 012).
	Event      *int64  `json:"event"`
	Name       string  `json:"name"`
	CreatedAt  string  `json:"created_at"`
	RevokedAt  *string `json:"revoked_at"`
	LastScanAt *string `json:"last_scan_at"`
	// Token is the device's bearer token, in the answer to its
	// registration only: the ledger keeps its hash.
	Token string `json:"token,omitempty"`
}

func deviceBody(d ledger.GateDevice) deviceJSON {
	opt := func(t *time.Time) *string {
		if t == nil {
			return nil
		}
		s := scanTime(*t)
		return &s
	}
	return deviceJSON{ID: d.ID, Gate: d.Gate, Event: d.Event, Name: d.Name, CreatedAt: scanTime(d.CreatedAt),
		RevokedAt: opt(d.RevokedAt), LastScanAt: opt(d.LastScanAt)}
}

// maxDeviceName is the longest device name, in bytes.
const maxDeviceName = 100

// handleAddDevice serves POST /v1/admin/gate-devices: a device registered
// for a gate of an event, with its token, shown this once.
func (s scansAPI) handleAddDevice(w http.ResponseWriter, r *http.Request) {
	if bodyTooLarge(w, r) || !s.gate.isAdmin(w, r) {
		return
	}
	body, bad := readBody(w, r)
	if bad != nil {
		writeResponse(w, *bad)
		return
	}
	var req struct {
		Gate  string `json:"gate"`
		Event *int64 `json:"event"`
		Name  string `json:"name"`
	}
	if bad := decodeStrict(body, &req); bad != nil {
		writeResponse(w, *bad)
		return
	}
	switch {
	case !gateName.MatchString(req.Gate):
		writeError(w, http.StatusBadRequest, "invalid_request", "gate must be 1–64 letters, digits and . _ : - (e.g. north-3)")
		return
	case req.Event == nil || *req.Event <= 0:
		writeError(w, http.StatusBadRequest, "invalid_request", "event must be the id of the event whose tickets the device admits (a positive integer)")
		return
	case len(req.Name) > maxDeviceName:
		writeError(w, http.StatusBadRequest, "invalid_request", "name is at most 100 bytes")
		return
	}
	if _, err := s.ledger.Event(r.Context(), *req.Event); err != nil {
		lookupFailed(w, err, "event")
		return
	}
	id, token, hash := newDeviceToken()
	d, err := s.ledger.AddGateDevice(r.Context(), ledger.NewGateDevice{ID: id, Gate: req.Gate, Event: *req.Event, Name: req.Name,
		SecretHash: hash, CreatedAt: s.cfg.Clock().UTC()})
	if err != nil {
		s.log.Warn("gate device not registered", "gate", req.Gate, "error", err)
		writeResponse(w, errUnavailable)
		return
	}
	s.log.Info("gate device registered", "device", d.ID, "gate", d.Gate, "event", *req.Event)
	j := deviceBody(d)
	j.Token = token
	writeJSON(w, http.StatusCreated, j)
}

// handleDevices serves GET /v1/admin/gate-devices.
func (s scansAPI) handleDevices(w http.ResponseWriter, r *http.Request) {
	if !s.gate.isAdmin(w, r) {
		return
	}
	ds, err := s.ledger.GateDevices(r.Context())
	if err != nil {
		writeResponse(w, errUnavailable)
		return
	}
	out := make([]deviceJSON, len(ds))
	for i, d := range ds {
		out[i] = deviceBody(d)
	}
	writeJSON(w, http.StatusOK, map[string]any{"devices": out})
}

// handleRevokeDevice serves POST /v1/admin/gate-devices/{id}/revocation:
// the device's token admits nothing from the next request on.
func (s scansAPI) handleRevokeDevice(w http.ResponseWriter, r *http.Request) {
	if noBodyTooLarge(w, r) || !s.gate.isAdmin(w, r) {
		return
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusNotFound, "not_found", "no such gate device")
		return
	}
	d, err := s.ledger.RevokeGateDevice(r.Context(), id.String(), s.cfg.Clock().UTC())
	if err != nil {
		lookupFailed(w, err, "gate device")
		return
	}
	s.log.Info("gate device revoked", "device", d.ID, "gate", d.Gate)
	writeJSON(w, http.StatusOK, deviceBody(d))
}
