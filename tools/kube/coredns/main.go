// The test cluster's DNS server: CoreDNS v1.12.1 with only the plugins the real node's
// Corefile uses (tools/kube/realnode.py, corefile_text), in CoreDNS' own order of plugin.cfg.
// CoreDNS' main package links every plugin it ships (cloud DNS providers, tracing, etcd,
// dnstap ...); this one links six, so a cold build compiles a fraction of the modules.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

// directives: the chain's order, as CoreDNS' plugin.cfg orders these six.
var directives = []string{"bind", "ready", "errors", "cache", "template", "kubernetes"}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
