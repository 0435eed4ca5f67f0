package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
)

// Gate is a gate device online: it scans ticket codes at the origin
// (docs/api.md §11, the gate) for one event.
type Gate struct {
	Client
	// Token is the device's own token (GateDevice.Token), or the origin's
	// ORIGIN_GATE_TOKEN.
	Token string
	// Event is the event the gate admits to: required with the shared
	// token, 0 for a device's (the one it was registered for).
	Event int64
}

// GateDevice is a gate device registered at the origin.
type GateDevice struct {
	ID    string `json:"id"`
	Gate  string `json:"gate"`
	Event int64  `json:"event"`
	// Token is the device's bearer token, given at its registration only.
	Token string `json:"token"`
}

// AddGateDevice registers a gate device for gate of event.
func (a OriginAdmin) AddGateDevice(ctx context.Context, event int64, gate, name string) (GateDevice, error) {
	resp, err := a.Do(ctx, Request{Method: http.MethodPost, Path: "/v1/admin/gate-devices", Bearer: a.Token,
		Body: map[string]any{"gate": gate, "event": event, "name": name}})
	if err != nil {
		return GateDevice{}, fmt.Errorf("add gate device: %w", err)
	}
	if resp.Status != http.StatusCreated {
		return GateDevice{}, resp.Unexpected("add gate device")
	}
	var d GateDevice
	return d, resp.Decode(&d)
}

// Scan results.
const (
	ScanAdmitted    = "admitted"
	ScanAlreadyUsed = "already_used"
	ScanWrongEvent  = "wrong_event"
)

// ScanAnswer is the answer to a scan.
type ScanAnswer struct {
	Status int    `json:"-"`
	Result string `json:"result"`
	// Gate is the gate that admitted the ticket; FirstScannedAt, when it
	// was used already, when.
	Gate           string `json:"gate"`
	FirstScannedAt string `json:"first_scanned_at"`
	// Event is a wrong_event's: the event the ticket is for.
	Event int64 `json:"event"`
}

// Scan scans code at gate.
func (g Gate) Scan(ctx context.Context, code, gate string) (ScanAnswer, error) {
	body := map[string]any{"code": code, "gate": gate}
	if g.Event != 0 {
		body["event"] = g.Event
	}
	resp, err := g.Do(ctx, Request{Method: http.MethodPost, Path: "/v1/scans", Bearer: g.Token, Body: body})
	if err != nil {
		return ScanAnswer{}, fmt.Errorf("scan: %w", err)
	}
	var a ScanAnswer
	switch resp.Status {
	case http.StatusOK, http.StatusConflict, http.StatusGone, http.StatusBadRequest:
		if err := resp.Decode(&a); err != nil {
			return ScanAnswer{}, err
		}
	default:
		return ScanAnswer{Status: resp.Status}, resp.Unexpected("scan")
	}
	a.Status = resp.Status
	return a, nil
}

// ScanTotals is the ledger's count of an event's scans.
type ScanTotals struct {
	Admitted         int64 `json:"admitted"`
	AlreadyUsed      int64 `json:"already_used"`
	Void             int64 `json:"ticket_void"`
	WrongEvent       int64 `json:"wrong_event"`
	DoubleAdmissions int64 `json:"double_admissions"`
}

// ScanTotals reads the scans at the event's gates counted in the ledger.
func (a OriginAdmin) ScanTotals(ctx context.Context, event int64) (ScanTotals, error) {
	path := "/v1/admin/events/" + strconv.FormatInt(event, 10) + "/scans"
	resp, err := a.Do(ctx, Request{Method: http.MethodGet, Path: path, Bearer: a.Token})
	if err != nil {
		return ScanTotals{}, fmt.Errorf("scan totals: %w", err)
	}
	if resp.Status != http.StatusOK {
		return ScanTotals{}, resp.Unexpected("scan totals")
	}
	var t ScanTotals
	return t, resp.Decode(&t)
}
