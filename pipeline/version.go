package pipeline

import "runtime/debug"

// codeVersion can be set at link time:
// -ldflags "-X github.com/evolm/evolm/pipeline.codeVersion=$(git describe --always --dirty)".
var codeVersion string

// CodeVersion identifies the code that writes shards: the link-time version,
// else the VCS revision Go stamped into the binary, else "devel".
func CodeVersion() string {
	if codeVersion != "" {
		return codeVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return v
		}
	}
	return "devel"
}
