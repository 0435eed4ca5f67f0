package main

import (
	"context"
	"io"
)

func runGate(ctx context.Context, args []string, out, errOut io.Writer) error  { return nil }
func runHolds(ctx context.Context, args []string, out, errOut io.Writer) error { return nil }
