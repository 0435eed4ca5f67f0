package inventory

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Each script is wrapped once: Run sends EVALSHA and falls back to EVAL only
// when the server does not have the script yet (after a restart or a flush).
var (
	//go:embed hold.lua
	holdSrc    string
	holdScript = redis.NewScript(holdSrc)

	//go:embed release.lua
	releaseSrc    string
	releaseScript = redis.NewScript(releaseSrc)

	//go:embed confirm.lua
	confirmSrc    string
	confirmScript = redis.NewScript(confirmSrc)

	//go:embed extend.lua
	extendSrc    string
	extendScript = redis.NewScript(extendSrc)

	//go:embed reclaim.lua
	reclaimSrc    string
	reclaimScript = redis.NewScript(reclaimSrc)

	//go:embed rebuild_load.lua
	rebuildLoadSrc    string
	rebuildLoadScript = redis.NewScript(rebuildLoadSrc)

	//go:embed rebuild_finish.lua
	rebuildFinishSrc    string
	rebuildFinishScript = redis.NewScript(rebuildFinishSrc)
)

var (
	//go:embed correct.lua
	correctSrc    string
	correctScript = redis.NewScript(correctSrc)
)
