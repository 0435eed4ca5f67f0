package qrpng_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"image/png"
	"strings"
	"testing"

	"github.com/makiuchi-d/gozxing"
	zxqr "github.com/makiuchi-d/gozxing/qrcode"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/qrpng"
)

// The image decodes back to the text with an independent decoder (ZXing's
// port). It is read as the pure symbol it is: the port's detector, which
// estimates the module grid from the finder patterns, misplaces a version 8
// symbol now and then (9 in 300 random ticket codes) that reads every time
// from its modules.
func TestDecodesBack(t *testing.T) {
	tests := map[string]struct {
		text string
		size int
	}{
		"a ticket code's length": {text: "AnyAe8S1o5hK7Cq0bWv-Qx3TQ_oUYh2lKb2Z4TfC0Xrm5W3kKXWbqgoAAAAAAAAAKgAAAAAAAAAABUEtMS03" +
			"w9JbQm5Mx1u6H0A8o2ae0EYvkSyqg8VYoA3hr7U2bKk8ZlF3hXoiD8x1M1J0ThQmZ1ZT7j9wUQqYH0h9aAA", size: 384},
		"short":              {text: "north-3", size: 100},
		"one pixel a module": {text: "x", size: 29},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := qrpng.Encode(tc.text, tc.size)
			require.NoError(t, err)
			img, err := png.Decode(bytes.NewReader(b))
			require.NoError(t, err)
			assert.Equal(t, tc.size, img.Bounds().Dx())
			assert.Equal(t, tc.size, img.Bounds().Dy())
			bmp, err := gozxing.NewBinaryBitmapFromImage(img)
			require.NoError(t, err)
			got, err := zxqr.NewQRCodeReader().Decode(bmp, pure)
			require.NoError(t, err)
			assert.Equal(t, tc.text, got.GetText())
		})
	}
}

// pure reads an image holding nothing but the symbol and its quiet zone.
var pure = map[gozxing.DecodeHintType]any{gozxing.DecodeHintType_PURE_BARCODE: true}

func TestTooSmall(t *testing.T) {
	_, err := qrpng.Encode(strings.Repeat("x", 100), 40)
	assert.ErrorContains(t, err, "too few")
}

// Ticket codes are random bytes: every one of many decodes back.
func TestDecodesRandomCodes(t *testing.T) {
	for range 100 {
		raw := make([]byte, 104)
		_, _ = rand.Read(raw)
		text := base64.RawURLEncoding.EncodeToString(raw)
		b, err := qrpng.Encode(text, 384)
		require.NoError(t, err)
		img, err := png.Decode(bytes.NewReader(b))
		require.NoError(t, err)
		bmp, err := gozxing.NewBinaryBitmapFromImage(img)
		require.NoError(t, err)
		got, err := zxqr.NewQRCodeReader().Decode(bmp, pure)
		require.NoError(t, err, text)
		require.Equal(t, text, got.GetText())
	}
}
