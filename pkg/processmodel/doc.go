// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package processmodel says what runs where in the extension's process: every replica's manager never campaigns and
// serves the webhooks, and what needs one writer runs in leader terms (Terms), so that losing the lease, or
// kube-apiserver going away, ends a term and never the process: controller-runtime's manager exits on a lost lease,
// and with one control-plane node that happens at every kube-apiserver restart. Each controller says where it runs
// (Controller); one switch set (Switches) serves --controllers for both kinds. docs/development/process-model.md has
// the table.
package processmodel
