package evaluation

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/configs"
)

// AppsDir is the directory of the applications in configs.FS: profiles.yaml
// (hardware and every model's profiles) and one session per application.
const AppsDir = "paper/apps"

// PoolsDir holds the other GPU pools in configs.FS, one file each
// (hardware and profiles), loaded in place of AppsDir/profiles.yaml.
const PoolsDir = "paper/pools"

// Pools names the GPU pools `piccolo bench paper --pool` takes: the paper's
// testbed (AppsDir/profiles.yaml, the default) and one file per other pool
// in PoolsDir. docs/evaluation/sources.md gives every number's source.
var Pools = []string{"testbed", "current"}

// AppNames are the paper's five applications in §IV-A's order.
var AppNames = []string{"traffic", "face", "pose", "caption", "actdet"}

// Apps loads the five applications from configs.FS into one config: the
// hardware and profiles of profiles.yaml and one session per application, named
// as in AppNames. Errors name the file.
func Apps() (*api.Config, error) { return AppsOn("testbed") }

// AppsOn is Apps on the named GPU pool (Pools): "testbed" (or "") is the
// paper's, any other replaces AppsDir/profiles.yaml with PoolsDir/<pool>.yaml.
// Errors: an unknown pool, or Apps'.
func AppsOn(pool string) (*api.Config, error) {
	names, err := fs.Glob(configs.FS, path.Join(AppsDir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if pool != "" && pool != "testbed" {
		f := path.Join(PoolsDir, pool+".yaml")
		if _, err := fs.Stat(configs.FS, f); err != nil {
			return nil, fmt.Errorf("evaluation: pool %q: no configs/%s (pools: %v)", pool, f, Pools)
		}
		names = slices.DeleteFunc(names, func(n string) bool { return path.Base(n) == "profiles.yaml" })
		names = append(names, f)
	}
	sort.Strings(names)
	docs := make([]api.NamedDoc, 0, len(names))
	for _, n := range names {
		data, err := fs.ReadFile(configs.FS, n)
		if err != nil {
			return nil, fmt.Errorf("evaluation: %s: %w", n, err)
		}
		docs = append(docs, api.NamedDoc{Name: "configs/" + n, Data: data})
	}
	cfg, err := api.LoadBytes(docs...)
	if err != nil {
		return nil, fmt.Errorf("evaluation: the paper's applications: %w", err)
	}
	for _, a := range AppNames {
		if _, ok := cfg.Session(a); !ok {
			return nil, fmt.Errorf("evaluation: configs/%s has no session %q", AppsDir, a)
		}
	}
	return cfg, nil
}
