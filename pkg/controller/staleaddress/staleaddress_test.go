// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package staleaddress

import (
	"context"
	"net"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
)

func addrs(ips ...string) func() ([]net.Addr, error) {
	return func() ([]net.Addr, error) {
		var out []net.Addr
		for _, ip := range ips {
			out = append(out, &net.IPNet{IP: net.ParseIP(ip), Mask: net.CIDRMask(24, 32)})
		}
		return out, nil
	}
}

// TestReplacesItsPodOnceTheAddressIsGone: while the host has the pod's address nothing happens; once it is gone, the
// pod is deleted at the second look in a row (an address being moved is not a lost one).
func TestReplacesItsPodOnceTheAddressIsGone(t *testing.T) {
	ctx := context.Background()
	stored := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "extension-cilium-selfhosted", Name: "extension-abcde", UID: "uid-1"}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(stored).Build()
	r := &Replacer{Pod: Pod{Name: stored.Name, Namespace: stored.Namespace, UID: "uid-1", IP: "10.0.1.10", Node: "cp-0"}, Writer: c, Log: logr.Discard()}
	exists := func() bool {
		err := c.Get(ctx, client.ObjectKeyFromObject(stored), &corev1.Pod{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	r.Addresses = addrs("127.0.0.1", "10.0.1.10")
	r.look(ctx)
	r.look(ctx)
	if !exists() {
		t.Fatal("deleted while the host has the pod's address")
	}
	r.Addresses = addrs("127.0.0.1", "10.0.1.30")
	r.look(ctx)
	if !exists() {
		t.Fatal("deleted at the first look without the address")
	}
	r.Addresses = addrs("127.0.0.1", "10.0.1.10")
	r.look(ctx)
	r.Addresses = addrs("127.0.0.1", "10.0.1.30")
	r.look(ctx)
	if !exists() {
		t.Fatal("deleted although the address came back in between")
	}
	r.look(ctx)
	if exists() {
		t.Fatal("not deleted at the second look in a row without the address")
	}
}

func TestStale(t *testing.T) {
	have, _ := addrs("10.0.1.10", "fd00::10")()
	for ip, want := range map[string]bool{"10.0.1.10": false, "fd00::10": false, "10.0.1.11": true, "": true} {
		if got := Stale(ip, have); got != want {
			t.Errorf("Stale(%q) = %v, want %v", ip, got, want)
		}
	}
}
