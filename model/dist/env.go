package dist

import (
	"fmt"
	"os"
	"strconv"
)

// FromEnv reads the options torchrun (and torch.distributed's env://) passes
// to each worker: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT,
// and TORCHELASTIC_USE_AGENT_STORE / TORCHELASTIC_RESTART_COUNT when the
// launcher hosts the store. RANK and WORLD_SIZE are required; LOCAL_RANK
// defaults to 0, MASTER_ADDR to 127.0.0.1, MASTER_PORT to 29500. Backend and
// Timeout are left for the caller.
func FromEnv() (Options, error) {
	var o Options
	var err error
	if o.Rank, err = envInt("RANK", -1); err != nil {
		return o, err
	}
	if o.WorldSize, err = envInt("WORLD_SIZE", -1); err != nil {
		return o, err
	}
	if o.Rank < 0 || o.WorldSize < 1 {
		return o, fmt.Errorf("dist: RANK and WORLD_SIZE must be set (got %q, %q)", os.Getenv("RANK"), os.Getenv("WORLD_SIZE"))
	}
	if o.Rank >= o.WorldSize {
		return o, fmt.Errorf("dist: RANK=%d out of range for WORLD_SIZE=%d", o.Rank, o.WorldSize)
	}
	if o.LocalRank, err = envInt("LOCAL_RANK", 0); err != nil {
		return o, err
	}
	o.MasterAddr = os.Getenv("MASTER_ADDR")
	if o.MasterAddr == "" {
		o.MasterAddr = "127.0.0.1"
	}
	if o.MasterPort, err = envInt("MASTER_PORT", 29500); err != nil {
		return o, err
	}
	if o.MasterPort <= 0 || o.MasterPort > 65535 {
		return o, fmt.Errorf("dist: MASTER_PORT=%d out of range", o.MasterPort)
	}
	// torch.distributed.elastic.utils.distributed: the agent store is used
	// when the variable reads "True".
	o.AgentStore = os.Getenv("TORCHELASTIC_USE_AGENT_STORE") == "True"
	if o.AgentStore {
		if o.RestartCount, err = envInt("TORCHELASTIC_RESTART_COUNT", 0); err != nil {
			return o, err
		}
	}
	return o, nil
}

func envInt(name string, def int) (int, error) {
	s := os.Getenv(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("dist: %s=%q: not an integer", name, s)
	}
	return n, nil
}

// Env is the environment FromEnv reads, for launching rank r of o's group
// (as torchrun would, without an agent store): RANK, WORLD_SIZE, LOCAL_RANK
// (= r), MASTER_ADDR, MASTER_PORT. Tests and benchmarks launch ranks with it.
func Env(o Options, r int) []string {
	return []string{
		"RANK=" + strconv.Itoa(r),
		"WORLD_SIZE=" + strconv.Itoa(o.WorldSize),
		"LOCAL_RANK=" + strconv.Itoa(r),
		"MASTER_ADDR=" + o.MasterAddr,
		"MASTER_PORT=" + strconv.Itoa(o.MasterPort),
	}
}
