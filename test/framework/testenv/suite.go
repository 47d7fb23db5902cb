// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/reaper"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// RunSuite is the TestMain of a suite against the running extension: it starts the control plane, creates the
// self-hosted shoot described by shoot, builds the extension binary and starts it with its production flags, waits
// until it has registered its webhooks, hands the environment to setup (which may start more and return how to stop
// it), runs the tests and stops everything. It returns the exit code for os.Exit.
//
// The extension runs as the chart's ServiceAccount (impersonated) with exactly the chart's RBAC, and a suite fails when
// the extension's log shows a request the API server refused.
//
// The extension runs as a process, as in its pod, not in the test binary.
func RunSuite(m *testing.M, shoot *gardencorev1beta1.Shoot, opts Options, setup Setup) int {
	return RunSuiteOn(m, 1, shoot, opts, func(ctx context.Context, envs []*Env) (func(), error) { return setup(ctx, envs[0]) })
}

// RunSuiteOn is RunSuite with planes control planes, each with the shoot and an extension of its own, started side by
// side and handed to setup together: for a suite whose cases run at once on clusters apart.
func RunSuiteOn(m *testing.M, planes int, shoot *gardencorev1beta1.Shoot, opts Options, setup func(context.Context, []*Env) (func(), error)) int {
	if err := Check(append([]Prerequisite{EnvtestAssets}, opts.Prerequisites...)...); err != nil {
		return CannotRun(err)
	}
	// The suite's clients and the resource manager it runs log through controller-runtime: their errors are shown,
	// without stack traces, their progress not; without a logger controller-runtime would print a stack trace saying
	// so instead.
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.ConsoleEncoder(), zap.Level(zapcore.ErrorLevel), zap.StacktraceLevel(zapcore.DPanicLevel)))
	code, err := runSuite(m, planes, shoot, opts, setup)
	PrintCPU()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return code
}

// PrintCPU prints, as a suite ends, the CPU time it and every process it started used (CPUPrefix), when the binary
// is confined (Check).
func PrintCPU() {
	if user, system, ok := reaper.CPU(); ok {
		fmt.Printf("%s%.0f s (user %.0f s, system %.0f s)\n", CPUPrefix, (user + system).Seconds(), user.Seconds(), system.Seconds())
	}
}

// Setup prepares a suite on the running environment and returns how to clean up after it.
type Setup func(ctx context.Context, env *Env) (cleanup func(), err error)

// Use is a Setup that only keeps the environment.
func Use(env **Env) Setup {
	return func(_ context.Context, e *Env) (func(), error) {
		*env = e
		return func() {}, nil
	}
}

func runSuite(m *testing.M, planes int, shoot *gardencorev1beta1.Shoot, opts Options, setup func(context.Context, []*Env) (func(), error)) (int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	envs := make([]*Env, planes)
	var starts errgroup.Group
	for i := range envs {
		starts.Go(func() (err error) {
			envs[i], err = startWithExtension(ctx, shoot.DeepCopy(), opts)
			return err
		})
	}
	err := starts.Wait()
	defer func() {
		for _, env := range envs {
			if env != nil {
				env.Extension.Stop(ctx)
				env.Stop()
			}
		}
	}()
	if err != nil {
		return 1, err
	}
	cleanup, err := setup(ctx, envs)
	if err != nil {
		return 1, err
	}
	defer cleanup()
	code := m.Run()
	for _, env := range envs {
		if lines := env.StillForbidden(ctx, Forbidden(env.extensionLogs.String()+env.Extension.Log())); len(lines) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: the chart's RBAC or admission policies refused the extension:\n%s\n", strings.Join(lines, "\n"))
			code = 1
		}
		if code != 0 {
			fmt.Fprintf(os.Stderr, "--- extension log (%s) ---\n%s%s", env.Dir, env.extensionLogs.String(), env.Extension.Log())
		}
	}
	return code, nil
}

// startWithExtension starts a control plane, creates the shoot and runs the extension; nil and the error if any step
// failed, having stopped what it started.
func startWithExtension(ctx context.Context, shoot *gardencorev1beta1.Shoot, opts Options) (*Env, error) {
	env, err := Start(opts)
	if err != nil {
		return nil, err
	}
	if err := env.CreateSelfHostedShoot(ctx, shoot); err != nil {
		env.Stop()
		return nil, err
	}
	if err := env.Extensions().Run(ctx, ""); err != nil {
		env.Stop()
		return nil, err
	}
	return env, nil
}

// Run starts the extension binary (built from this repository when binary is empty) with its production
// flags, as the chart's ServiceAccount (impersonated, with exactly the chart's RBAC), and waits until it has
// registered its webhooks and is ready, its metrics server listening. The caller stops Extension.
func (e Extensions) Run(ctx context.Context, binary string) error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	kubeconfig, err := e.InstallChart(ctx, port)
	if err != nil {
		return err
	}
	if binary == "" {
		if binary, err = BuildExtension(); err != nil {
			return err
		}
	}
	e.extensionCommand = append([]string{binary}, e.Flags(kubeconfig, ExtensionNamespace, port)...)
	if e.Extension, err = e.Start(binary, e.extensionCommand[1:]); err != nil {
		return err
	}
	if err := e.WaitForWebhooks(ctx, len(apiserveraccess.WebhookNames), e.Extension); err != nil {
		e.Extension.Stop(ctx)
		return fmt.Errorf("%w\n--- extension log ---\n%s", err, e.Extension.Log())
	}
	if err := e.waitUntilReady(e.Extension); err != nil {
		e.Extension.Stop(ctx)
		return err
	}
	return nil
}

// Command is the binary and flags Run started.
func (e Extensions) Command() []string { return e.extensionCommand }

// WebhookAddress is the address of the webhook server of the extension Run started.
func (e Extensions) WebhookAddress() string {
	for _, arg := range e.extensionCommand {
		if port, ok := strings.CutPrefix(arg, "--webhook-config-server-port="); ok {
			return "127.0.0.1:" + port
		}
	}
	return ""
}

// Restart stops the extension started by RunSuite, abruptly (as a node failure or an OOM kill does) or
// gracefully, and starts it again with the same flags and extra ones, which hold until the next start. It does not
// wait for the new process to lead: tests wait for what they need.
func (e Extensions) Restart(ctx context.Context, kill bool, extra ...string) error {
	e.Stop(ctx, kill)
	return e.StartAgain(extra...)
}

// Stop stops the extension started by RunSuite, abruptly (SIGKILL) or gracefully (SIGTERM).
func (e Extensions) Stop(ctx context.Context, kill bool) {
	if kill {
		e.Extension.Kill()
	} else {
		e.Extension.Stop(ctx)
	}
}

// StartAgain starts the stopped extension with the same flags and extra ones, keeping the earlier log.
func (e Extensions) StartAgain(extra ...string) error {
	e.extensionLogs.WriteString(e.Extension.Log() + fmt.Sprintf("--- restarted %v ---\n", extra))
	var err error
	if e.Extension, err = e.Start(e.extensionCommand[0], append(slices.Clone(e.extensionCommand[1:]), extra...)); err != nil {
		return err
	}
	return e.waitUntilReady(e.Extension)
}

// Probe is an HTTP probe of the process p as kubelet's: ready when url answers 200. An exit of p is its error.
func Probe(p *Process, hc *http.Client, url string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		select {
		case <-p.Stopped():
			return false, fmt.Errorf("the process exited: %v", p.Err())
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}
}

// waitUntilReady waits until the extension's readiness endpoint says ready (its webhook server runs and its caches
// have synced; it need not lead) and its metrics server listens, or the process ends.
func (e *Env) waitUntilReady(p *Process) error {
	readyz := Probe(p, &http.Client{Timeout: time.Second}, "http://"+e.HealthAddress+"/readyz")
	err := WaitFor(context.Background(), time.Minute, func(ctx context.Context) (bool, error) {
		if ready, err := readyz(ctx); !ready {
			return false, err
		}
		// The metrics server is started beside the health server, not before it: readiness does not say it listens.
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", e.MetricsAddress)
		if err != nil {
			return false, nil
		}
		return true, conn.Close()
	})
	if err != nil {
		return fmt.Errorf("the extension is not ready: %w\n%s", err, p.LogTail(20))
	}
	return nil
}

// StartReplica starts a second extension process beside the one RunSuite started, with the same flags except where
// it must differ: its own webhook server port, certificate directory, metrics and health addresses. The webhook
// configuration keeps pointing at the first process (as a Service would at both, in service mode). It returns the
// process and the address of its webhook server.
func (e Extensions) StartReplica() (*Process, string, error) {
	webhookPort, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	metricsPort, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	healthPort, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	replace := map[string]string{
		"--webhook-config-server-port": strconv.Itoa(webhookPort),
		"--webhook-config-cert-dir":    filepath.Join(e.Dir, "webhook-certs-replica"),
		"--metrics-bind-address":       "127.0.0.1:" + strconv.Itoa(metricsPort),
		"--health-bind-address":        "127.0.0.1:" + strconv.Itoa(healthPort),
	}
	args := make([]string, 0, len(e.extensionCommand)-1)
	for _, arg := range e.extensionCommand[1:] {
		if name, _, ok := strings.Cut(arg, "="); ok && replace[name] != "" {
			arg = name + "=" + replace[name]
		}
		args = append(args, arg)
	}
	p, err := StartProcess(filepath.Join(e.Dir, "extension-replica.log"), e.extensionCommand[0], args...)
	return p, "127.0.0.1:" + strconv.Itoa(webhookPort), err
}
