// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package registry runs Debian's docker-registry (the CNCF distribution registry, v2) on 127.0.0.1 for a suite: the
// registry an operator pushes the extension's image and chart to, and gardenlet and the nodes pull them from.
package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// EnvBinary names the variable with the path of the docker-registry binary, which make test sets from
// hack/image/registry.sh.
const EnvBinary = "DOCKER_REGISTRY"

// Available says whether the docker-registry binary is there (a testenv.Prerequisite).
func Available() error {
	path := os.Getenv(EnvBinary)
	if path == "" {
		return errors.New(EnvBinary + " is not set: run `make test`, or set it to what hack/image/registry.sh prints")
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s=%s: %w: run hack/image/registry.sh", EnvBinary, path, err)
	}
	return nil
}

// Registry is a running registry, storing into a folder of its own.
type Registry struct {
	// Host is its host:port on 127.0.0.1, which clients speak plain HTTP to (a loopback registry, as
	// go-containerregistry's name.Registry.Scheme decides and gardenlet therefore pulls).
	Host    string
	process *testenv.Process
}

// config is the registry's configuration (distribution's docs/configuration.md): filesystem storage, deletes allowed,
// HTTP on addr, no authentication.
const config = `version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`

// Start starts a registry that stores under dir, and returns once it answers /v2/.
func Start(ctx context.Context, dir string) (*Registry, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	host, err := FreeAddress()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "storage"), 0o755); err != nil {
		return nil, err
	}
	configPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(configPath, fmt.Appendf(nil, config, filepath.Join(dir, "storage"), host), 0o644); err != nil {
		return nil, err
	}
	process, err := testenv.StartProcess(filepath.Join(dir, "registry.log"), os.Getenv(EnvBinary), "serve", configPath)
	if err != nil {
		return nil, err
	}
	r := &Registry{Host: host, process: process}
	if err := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		select {
		case <-process.Stopped():
			return false, fmt.Errorf("docker-registry exited: %v\n%s", process.Err(), process.LogTail(20))
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/v2/", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		r.Stop(ctx)
		return nil, fmt.Errorf("the registry at %s: %w", host, err)
	}
	return r, nil
}

// Stop stops the registry.
func (r *Registry) Stop(ctx context.Context) { r.process.Stop(ctx) }

// Log is what the registry logged.
func (r *Registry) Log() string { return r.process.Log() }

// FreeAddress is a 127.0.0.1 address with a port nobody listens on now.
func FreeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}
