# xcaddy.mk — build Caddy with the waitroom module the way operators do, with
# xcaddy, and smoke-check the result. Included by the Makefile.
#
#   make xcaddy-build     Caddy $(CADDY_VERSION) + waitroom -> $(XCADDY_OUT)
#   make xcaddy-check     list-modules, adapt --validate and fmt --diff on Caddyfile.example

GO ?= go
BIN ?= bin
CADDY_VERSION ?= v2.11.9
XCADDY_VERSION ?= v0.4.5
XCADDY ?= $(GO) run github.com/caddyserver/xcaddy/cmd/xcaddy@$(XCADDY_VERSION)
XCADDY_OUT ?= $(BIN)/caddy-xcaddy
# Caddyfile.example reads its signing secret from the environment; the check
# only needs one that is long enough.
XCADDY_CHECK_SECRET ?= xcaddy-check-secret-for-validation-only

.PHONY: xcaddy-build xcaddy-check

# "@v0.0.0=." builds this checkout: with a bare "=." xcaddy asks the module
# proxy for the module's latest version first, which an unpublished checkout
# does not have.

xcaddy-build: ## build Caddy with xcaddy and this module (bin/caddy-xcaddy)
	@mkdir -p $(dir $(XCADDY_OUT))
	$(XCADDY) build $(CADDY_VERSION) --with github.com/waitroom/waitroom@v0.0.0=. --output $(XCADDY_OUT)

xcaddy-check: xcaddy-build ## smoke-check the xcaddy build against Caddyfile.example
	$(XCADDY_OUT) list-modules | grep -qx 'http.handlers.waitroom'
	$(XCADDY_OUT) list-modules | grep -qx 'admin.api.waitroom'
	WAITROOM_SECRET=$(XCADDY_CHECK_SECRET) $(XCADDY_OUT) adapt --config Caddyfile.example --validate >/dev/null
	$(XCADDY_OUT) fmt --diff Caddyfile.example >/dev/null
	@echo "xcaddy-check: $(XCADDY_OUT) lists both modules; Caddyfile.example is valid and formatted"
