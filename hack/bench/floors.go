// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// In section 3 the extension's webhook runs in its own process. The floors it is compared with must too: served from
// the bench's own process, which also sends the requests, they skipped a process switch that the extension pays, on a
// machine of two cores shared with kube-apiserver and etcd. The bench therefore starts itself again with
// -serve-floors DIR: that process serves the floors and writes their URL and CA bundle into DIR.

const (
	floorsURLFile    = "url"
	floorsCAFile     = "ca.crt"
	floorsReplayFile = "replay.json"
)

// serveFloors serves the floor handlers until it is told to stop.
func serveFloors(dir string, f *fixture) error {
	replay, err := os.ReadFile(filepath.Join(dir, floorsReplayFile))
	if err != nil {
		return err
	}
	var ops []jsonpatch.JsonPatchOperation
	if err := json.Unmarshal(replay, &ops); err != nil {
		return err
	}
	f.replay = admission.HandlerFunc(func(context.Context, admission.Request) admission.Response { return admission.Patched("", ops...) })
	ws, err := startWebhookServer(f, dir)
	if err != nil {
		return err
	}
	defer ws.cancel()
	if err := os.WriteFile(filepath.Join(dir, floorsCAFile), ws.caBundle, 0o600); err != nil {
		return err
	}
	// The URL last: the parent waits for it, so the CA bundle is there by then.
	if err := os.WriteFile(filepath.Join(dir, floorsURLFile), []byte(ws.url), 0o600); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	return nil
}

// startFloorsProcess starts the floor server as a process of its own, replaying the given patch; stop ends it.
func startFloorsProcess(ctx context.Context, dir string, replay []jsonpatch.JsonPatchOperation) (ws *webhookServer, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	dir = filepath.Join(dir, "floors")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(replay)
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, floorsReplayFile), b, 0o600); err != nil {
		return nil, nil, err
	}
	process, err := testenv.StartProcess(filepath.Join(dir, "floors.log"), self, "-serve-floors", dir)
	if err != nil {
		return nil, nil, err
	}
	stop = func() { process.Stop(context.Background()) }
	ws = &webhookServer{}
	if err := testenv.WaitFor(ctx, time.Minute, func(context.Context) (bool, error) {
		url, err := os.ReadFile(filepath.Join(dir, floorsURLFile))
		if err != nil {
			return false, nil //nolint:nilerr // not written yet
		}
		ws.url = string(url)
		ws.caBundle, err = os.ReadFile(filepath.Join(dir, floorsCAFile))
		return err == nil, err
	}); err != nil {
		stop()
		return nil, nil, fmt.Errorf("the floor server did not start: %w\n%s", err, process.Log())
	}
	return ws, stop, nil
}
