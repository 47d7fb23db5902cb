// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// profileAPIServer records kube-apiserver's CPU profile (its /debug/pprof, on by default) into profileDir/name.pprof
// until the returned function is called; it does nothing without -profile.
func profileAPIServer(env *testenv.Env, name string) (stop func()) {
	if profileDir == "" {
		return func() {}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.GroupVersion, cfg.NegotiatedSerializer = &schema.GroupVersion{}, scheme.Codecs.WithoutConversion()
	restClient, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The profile endpoint answers after its duration; a long one that is cancelled early returns nothing, so ask
		// for consecutive short ones and keep the last complete one per chunk.
		for i := 0; ctx.Err() == nil; i++ {
			b, err := restClient.Get().AbsPath("/debug/pprof/profile").Param("seconds", "10").DoRaw(ctx)
			if err != nil {
				if ctx.Err() == nil {
					fmt.Fprintln(os.Stderr, "profile:", err)
				}
				return
			}
			_ = os.MkdirAll(profileDir, 0o755)
			_ = os.WriteFile(filepath.Join(profileDir, fmt.Sprintf("%s-%02d.pprof", name, i)), b, 0o644)
		}
	}()
	return func() { cancel(); <-done }
}
