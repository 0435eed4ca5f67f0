package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The ledger's account of the money.

// MoneyCount is a number of bookings and the sum of their amounts, in the
// currency's smallest unit.
type MoneyCount struct {
	Count  int64 `json:"count"`
	Amount int64 `json:"amount"`
}

func (c MoneyCount) plus(o MoneyCount) MoneyCount {
	return MoneyCount{Count: c.Count + o.Count, Amount: c.Amount + o.Amount}
}

// MoneyReport is where the money of an event's bookings stands, as the
// ledger has it (bookings of amount 0 left out). Every payment taken ends
// confirmed with its tickets, refunded (the provider said so), or with its
// refund pending or visibly failed: Kept, money taken and none of those,
// is always 0.
type MoneyReport struct {
	Event int64 `json:"event"`
	// Captured is every booking whose payment the ledger knows was taken:
	// the sum of the five below (and, of the amounts, PartlyRefunded's).
	Captured MoneyCount `json:"captured"`
	// Confirmed: confirmed, with a valid ticket per seat; the amount is
	// what the sales kept, less what partial refunds returned.
	Confirmed MoneyCount `json:"confirmed"`
	// PartlyRefunded: the confirmed bookings part of whose money was
	// returned at the provider, and the amount returned. Its bookings are
	// counted in Confirmed.
	PartlyRefunded MoneyCount `json:"partly_refunded"`
	// Refunded: the provider reported the refund succeeded; no valid
	// ticket.
	Refunded MoneyCount `json:"refunded"`
	// RefundPending: a refund decided or made, not over yet.
	RefundPending MoneyCount `json:"refund_pending"`
	// RefundFailed: the provider reported the refund failed; the payment
	// reconciliation tries again.
	RefundFailed MoneyCount `json:"refund_failed"`
	// Kept: money taken, and neither a sale with its tickets nor a refund.
	Kept MoneyCount `json:"kept"`
	// PaymentPending counts the bookings still waiting for their payment's
	// outcome (not in Captured).
	PaymentPending MoneyCount `json:"payment_pending"`
}

// Settled reports whether nothing is waiting for the provider: no payment
// and no refund whose outcome is unknown.
func (r MoneyReport) Settled() bool { return r.PaymentPending.Count == 0 && r.RefundPending.Count == 0 }

// Err says what is wrong with the account: money kept, or parts that do not
// add up.
func (r MoneyReport) Err() error {
	var errs []error
	if r.Kept.Count != 0 {
		errs = append(errs, fmt.Errorf("event %d: %d payments (%d) taken with neither tickets nor a refund",
			r.Event, r.Kept.Count, r.Kept.Amount))
	}
	sum := r.Confirmed.plus(r.Refunded).plus(r.RefundPending).plus(r.RefundFailed).plus(r.Kept)
	sum.Amount += r.PartlyRefunded.Amount
	if sum != r.Captured {
		errs = append(errs, fmt.Errorf("event %d: captured %+v is not the sum of its parts %+v", r.Event, r.Captured, sum))
	}
	return errors.Join(errs...)
}

// MoneyReport reads where the money of an event's bookings stands.
func (l *Ledger) MoneyReport(ctx context.Context, eventID int64) (MoneyReport, error) {
	rows, err := l.pool.Query(ctx, sqlMoneyReport, eventID)
	if err != nil {
		return MoneyReport{}, fmt.Errorf("money report of event %d: %w", eventID, err)
	}
	type bucket struct {
		Bucket string `db:"bucket"`
		Count  int64  `db:"count"`
		Amount int64  `db:"amount"`
	}
	buckets, err := pgx.CollectRows(rows, pgx.RowToStructByName[bucket])
	if err != nil {
		return MoneyReport{}, fmt.Errorf("money report of event %d: %w", eventID, err)
	}
	r := MoneyReport{Event: eventID}
	for _, b := range buckets {
		c := MoneyCount{Count: b.Count, Amount: b.Amount}
		switch b.Bucket {
		case "payment_pending":
			r.PaymentPending = c
			continue
		case "not_taken":
			continue
		case "partly_refunded":
			r.PartlyRefunded = c
			r.Captured.Amount += c.Amount
			continue
		case "confirmed":
			r.Confirmed = c
		case "refunded":
			r.Refunded = c
		case "refund_pending":
			r.RefundPending = c
		case "refund_failed":
			r.RefundFailed = c
		default:
			r.Kept = r.Kept.plus(c)
		}
		r.Captured = r.Captured.plus(c)
	}
	return r, nil
}
