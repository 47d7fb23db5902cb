// Package apiserveraccess_test runs the extension (the same command and flags as in production) against a real
// kube-apiserver and checks that Cilium's objects come back from the API server pinned to the control plane.
package apiserveraccess_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/testenv"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// run starts the control plane and the extension binary with its production flags. The extension runs as a process,
// not in the test binary: Gardener's webhook framework (v1.150) races with itself on the webhook configuration object
// between its one-shot registration and its certificate controller, which would fail every run under -race.
func run(m *testing.M) (int, error) {
	var err error
	if env, err = testenv.Start(); err != nil {
		return 1, err
	}
	defer env.Stop()

	ctx := context.Background()
	if err := env.CreateSelfHostedShoot(ctx); err != nil {
		return 1, err
	}
	binary, err := testenv.BuildExtension(env.Dir)
	if err != nil {
		return 1, err
	}
	port, err := testenv.FreePort()
	if err != nil {
		return 1, err
	}
	extension, err := env.StartExtension(binary, env.ExtensionFlags(testenv.ExtensionNamespace, port))
	if err != nil {
		return 1, err
	}
	defer extension.Stop(ctx)

	if err := env.WaitForExtension(ctx, len(apiserveraccess.WebhookNames), extension.Stopped()); err != nil {
		return 1, fmt.Errorf("%w\n--- extension log ---\n%s", err, extension.Log())
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- extension log ---\n%s", extension.Log())
	}
	return code, nil
}
