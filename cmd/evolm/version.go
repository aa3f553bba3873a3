package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/evolm/evolm/model/dist"
	"github.com/evolm/evolm/model/torch"
)

// versionReport is what `evolm version` prints: the build, the libtorch it
// loaded, CUDA and NCCL, the devices it sees and the gotch overlay.
type versionReport struct {
	Evolm    string   `json:"evolm"`
	Go       string   `json:"go"`
	Platform string   `json:"platform"`
	Libtorch string   `json:"libtorch"`
	LibDir   string   `json:"libtorch_lib"`
	Build    string   `json:"build"` // "cpu" or "cuda"
	CUDA     string   `json:"cuda"`  // runtime version compiled in, "" if none
	CuDNN    string   `json:"cudnn,omitempty"`
	Headers  string   `json:"cuda_headers,omitempty"`
	NCCL     string   `json:"nccl"` // library version, "" if not compiled in
	Threads  int      `json:"cpu_threads"`
	Devices  []string `json:"cuda_devices"`
	NoDevice string   `json:"cuda_devices_error,omitempty"` // why none is visible
	Overlay  []string `json:"gotch_overlay"`
	Problems []string `json:"problems,omitempty"` // a libtorch version mismatch
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Show the build: libtorch, CUDA and NCCL compiled in or not, the devices visible, the gotch overlay",
		Long: `Prints what a bug report needs about this binary: its revision, the libtorch
it loaded, whether it was built with CUDA (TORCH_CUDA=1 make build) and NCCL,
the CUDA devices it sees (counting them initializes CUDA; no GPU is needed)
and what scripts/gotch-overlay.sh changed in gotch. 'evolm --version' prints
the same.`,
		Args: cobra.NoArgs,
		// No config: the report must print where loading one fails.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := collectVersion()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			r.write(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// addVersionFlag gives root --version, which prints the report (the
// template runs only when the flag is given).
func addVersionFlag(root *cobra.Command) {
	root.Version = "see the template" // non-empty: cobra adds --version
	cobra.AddTemplateFunc("evolmVersionReport", func() string {
		var b strings.Builder
		collectVersion().write(&b)
		return b.String()
	})
	root.SetVersionTemplate("{{evolmVersionReport}}")
}

func collectVersion() versionReport {
	r := versionReport{
		Evolm:    "(unknown)",
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
		Build:    "cpu",
		Headers:  torch.CUDAHeaders,
		NCCL:     dist.NCCLVersion(),
		Threads:  torch.NumThreads(),
		Devices:  []string{},
		Overlay:  torch.OverlayPatches(),
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		r.Evolm = buildRevision(bi)
	}
	if torch.CUDABuilt() {
		r.Build, r.CUDA, r.CuDNN = "cuda", torch.CUDARuntimeVersion(), torch.CuDNNVersion()
		devs, err := torch.CUDADevices()
		for _, d := range devs {
			r.Devices = append(r.Devices, fmt.Sprintf("cuda:%d %s (sm_%d%d, %.1f GiB)", d.Index, d.Name, d.Major, d.Minor, float64(d.Memory)/(1<<30)))
		}
		if err != nil {
			r.NoDevice = err.Error()
		}
	}
	r.LibDir = torch.LoadedLibDir()
	if r.LibDir != "" {
		v, _, err := torch.VersionAt(r.LibDir)
		r.Libtorch = v
		if err != nil {
			r.Problems = append(r.Problems, err.Error())
		}
		if err := torch.CheckVersionAt(r.LibDir); err != nil {
			r.Problems = append(r.Problems, strings.SplitN(err.Error(), "\n", 2)[0])
		}
	}
	return r
}

// buildRevision is the VCS revision of a build from a checkout (with
// "+modified" for uncommitted changes, and its commit time), else the
// module version.
func buildRevision(bi *debug.BuildInfo) string {
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return bi.Main.Version
	}
	if modified {
		rev += "+modified"
	}
	if at != "" {
		rev += " (" + at + ")"
	}
	return rev
}

func (r versionReport) write(w io.Writer) {
	orNot := func(v, yes, no string) string {
		if v == "" {
			return no
		}
		return fmt.Sprintf(yes, v)
	}
	fmt.Fprintf(w, "evolm %s, %s %s\n", r.Evolm, r.Go, r.Platform)
	fmt.Fprintf(w, "libtorch: %s (%s)\n", orText(r.Libtorch, "unknown version"), orText(r.LibDir, "library not found in /proc/self/maps"))
	fmt.Fprintf(w, "build: %s\n", r.Build)
	cuda := orNot(r.CUDA, "compiled in (CUDA runtime %s", "not compiled in (a CPU build; TORCH_CUDA=1 make build links it)")
	if r.CUDA != "" {
		if r.CuDNN != "" {
			cuda += ", cuDNN " + r.CuDNN
		}
		if r.Headers != "" {
			cuda += "; built with the headers of " + r.Headers
		}
		cuda += ")"
	}
	fmt.Fprintf(w, "CUDA: %s\n", cuda)
	fmt.Fprintf(w, "NCCL: %s\n", orNot(r.NCCL, "compiled in (ProcessGroupNCCL; NCCL %s)", "not compiled in"))
	fmt.Fprintf(w, "devices: cpu (%d libtorch threads)\n", r.Threads)
	switch {
	case r.Build == "cpu":
		fmt.Fprintln(w, "  cuda: none (not compiled in)")
	case len(r.Devices) == 0:
		fmt.Fprintf(w, "  cuda: none visible (%s)\n", strings.TrimPrefix(r.NoDevice, "no CUDA device is visible: "))
	}
	for _, d := range r.Devices {
		fmt.Fprintf(w, "  %s\n", d)
	}
	fmt.Fprintln(w, "gotch overlay (scripts/gotch-overlay.sh):")
	if len(r.Overlay) == 0 {
		fmt.Fprintln(w, "  none (built without build/overlay.json)")
	}
	for _, p := range r.Overlay {
		fmt.Fprintf(w, "  %s\n", p)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
}
