package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// flagSet is a subcommand's flags; errors go to the caller as usage errors
// rather than being printed by the flag package.
type flagSet struct {
	*flag.FlagSet
	synopsis string
	errOut   io.Writer
}

func newFlags(name, synopsis string, errOut io.Writer) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, synopsis: synopsis, errOut: errOut}
}

// parse parses args; a bad flag is a usage error, -h prints the flags and
// returns flag.ErrHelp.
func (fs *flagSet) parse(args []string) error {
	err := fs.Parse(args)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(fs.errOut, "usage: go run ./loadtest %s [flags]\n\n%s\n\nflags:\n", fs.Name(), fs.synopsis)
		fs.SetOutput(fs.errOut)
		fs.PrintDefaults()
		return err
	default:
		return usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// servers are the Redis and PostgreSQL a run uses, from the environment
// (scripts/services.sh sets both) or flags.
type servers struct {
	redisURL, databaseURL string
}

func (s *servers) register(fs *flagSet, database bool) {
	fs.StringVar(&s.redisURL, "redis-url", os.Getenv("REDIS_URL"), "Redis to use (default $REDIS_URL)")
	if database {
		fs.StringVar(&s.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL server to create the run's database on (default $DATABASE_URL)")
	}
}

func (s *servers) check(needRedis, needDB bool) error {
	var missing []string
	if needRedis && s.redisURL == "" {
		missing = append(missing, "REDIS_URL (or --redis-url)")
	}
	if needDB && s.databaseURL == "" {
		missing = append(missing, "DATABASE_URL (or --database-url)")
	}
	if len(missing) > 0 {
		return usagef("%s not set; run under scripts/services.sh, which starts private servers and sets them", strings.Join(missing, " and "))
	}
	return nil
}

// positive checks that every named value is above zero.
func positive(vals map[string]float64) error {
	for name, v := range vals {
		if v <= 0 {
			return usagef("--%s must be positive (got %v)", name, v)
		}
	}
	return nil
}

// fraction checks that every named value is in [0, 1].
func fraction(vals map[string]float64) error {
	for name, v := range vals {
		if v < 0 || v > 1 {
			return usagef("--%s must be between 0 and 1 (got %v)", name, v)
		}
	}
	return nil
}
