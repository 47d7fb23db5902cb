// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package identity is how this extension names itself to the cluster: the field owner of what it applies and the
// label that marks what it owns. The webhook half and the exposure half both write objects under it.
package identity

import (
	utilstrings "k8s.io/utils/strings"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// Name is the extension's name.
	Name = "gardener-extension-cilium-selfhosted"
	// LabelManagedBy marks the objects this extension owns, with the value Name.
	LabelManagedBy = "app.kubernetes.io/managed-by"
)

// FieldOwner is the server-side-apply field manager of everything the extension applies.
const FieldOwner = client.FieldOwner(Name)

// ManagedBy is the label set that marks an object as owned by this extension.
func ManagedBy() map[string]string { return map[string]string{LabelManagedBy: Name} }

// eventNoteLimit is the longest note kube-apiserver accepts in an events.k8s.io/v1 Event (NoteLengthLimit,
// k8s.io/kubernetes pkg/apis/core/validation/events.go); client-go's recorder sends a longer one as it is, and it is
// lost.
const eventNoteLimit = 1024

// EventNote is note cut to what an event the extension records may carry.
func EventNote(note string) string { return utilstrings.ShortenString(note, eventNoteLimit) }
