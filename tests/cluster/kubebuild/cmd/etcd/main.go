// Command etcd is the etcd server at the version k8s.io/kubernetes itself requires,
// so the test cluster's storage always matches the API server built beside it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
