package storefront

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/locale"
)

// TestMoneyInTheCurrencysOwnDecimals: an amount is in the currency's
// smallest unit, which is a hundredth of a rupee or a euro but a whole yen
// and a thousandth of a dinar: the page shows what the provider charges.
func TestMoneyInTheCurrencysOwnDecimals(t *testing.T) {
	cat, err := locale.Load("")
	require.NoError(t, err)
	en := view{Text: cat.Choose("en")}
	de := view{Text: cat.Choose("de")}
	for _, tc := range []struct {
		v        view
		amount   int64
		currency string
		want     string
	}{
		{en, 240000, "inr", "2,400.00 INR"},
		{en, 5000, "jpy", "5,000 JPY"},
		{en, 12500, "kwd", "12.500 KWD"},
		{en, 99, "eur", "0.99 EUR"},
		{en, -1050, "usd", "-10.50 USD"},
		{de, 240000, "eur", "2.400,00 EUR"},
		{de, 12500, "kwd", "12,500 KWD"},
		{en, 1234, "xyz", "12.34 XYZ"},
	} {
		assert.Equal(t, tc.want, tc.v.Money(tc.amount, tc.currency), "%d %s in %s", tc.amount, tc.currency, tc.v.Lang())
	}
}
