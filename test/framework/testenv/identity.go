// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NodeNameExtra is the user-info extra that kube-apiserver gives the token of a pod bound to a node: the node's name
// (k8s.io/apiserver pkg/authentication/serviceaccount util.go), which admission policies read.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// Identity is who a request comes from, as kube-apiserver authenticates it.
type Identity struct {
	User   string
	Groups []string
	// Node is the node a ServiceAccount's pod-bound token names; empty for any other credential.
	Node string
}

// ServiceAccount is the identity of namespace/name's token, bound to a pod on node (empty: a token bound to no pod).
func ServiceAccount(namespace, name, node string) Identity {
	return Identity{
		User:   "system:serviceaccount:" + namespace + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		Node:   node,
	}
}

// Kubelet is the identity of node's kubelet (its client certificate).
func Kubelet(node string) Identity {
	return Identity{User: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}}
}

// ConfigAs is the test's admin configuration impersonating id.
func (e *Env) ConfigAs(id Identity) *rest.Config {
	config := rest.CopyConfig(e.Config)
	config.Impersonate = rest.ImpersonationConfig{UserName: id.User, Groups: id.Groups}
	if id.Node != "" {
		config.Impersonate.Extra = map[string][]string{NodeNameExtra: {id.Node}}
	}
	return config
}

// ClientAs is a client that sends every request as id, impersonated by the test's admin.
func (e *Env) ClientAs(id Identity) (client.Client, error) {
	return client.New(e.ConfigAs(id), client.Options{Scheme: e.Client.Scheme()})
}
