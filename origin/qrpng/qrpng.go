// Package qrpng draws text as a QR code in a PNG image: the symbol from
// github.com/yeqown/go-qrcode/v2, the pixels from the standard library
// (the encoder's own PNG writer is a module of its own that pulls in a
// drawing library for what is a few black squares).
package qrpng

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"

	qrcode "github.com/yeqown/go-qrcode/v2"
)

// quietZone is the blank border around the symbol, in modules: the four
// the QR standard asks for, which scanners need to find the code.
const quietZone = 4

// Encode draws text as a size × size PNG, with error correction level M
// (15% of the symbol may be lost). The symbol is scaled by the largest
// whole number of pixels per module that fits, and centred, so every module
// is a crisp square; it fails when size is too small for one pixel per
// module.
func Encode(text string, size int) ([]byte, error) {
	qr, err := qrcode.NewWith(text, qrcode.WithErrorCorrectionLevel(qrcode.ErrorCorrectionMedium))
	if err != nil {
		return nil, fmt.Errorf("qr code: %w", err)
	}
	var m modules
	if err := qr.Save(&m); err != nil {
		return nil, fmt.Errorf("qr code: %w", err)
	}
	n := len(m.bits)
	scale := size / (n + 2*quietZone)
	if scale < 1 {
		return nil, fmt.Errorf("qr code: %d pixels are too few for %d modules and the quiet zone", size, n)
	}
	img := image.NewPaletted(image.Rect(0, 0, size, size), color.Palette{color.White, color.Black})
	offset := (size - n*scale) / 2
	for y, row := range m.bits {
		for x, dark := range row {
			if !dark {
				continue
			}
			for dy := range scale {
				for dx := range scale {
					img.SetColorIndex(offset+x*scale+dx, offset+y*scale+dy, 1)
				}
			}
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("qr code: %w", err)
	}
	return buf.Bytes(), nil
}

// modules is a qrcode.Writer keeping the symbol's modules, dark true.
type modules struct{ bits [][]bool }

func (m *modules) Write(mat qrcode.Matrix) error {
	m.bits = mat.Bitmap()
	return nil
}

func (m *modules) Close() error { return nil }
