// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// eventTimeout bounds the wait for an event: client-go's recorder writes events in the background
// (tools/record EventBroadcaster), after whatever the recording component did next, its status included.
const eventTimeout = 30 * time.Second

// WaitForEvent waits until an event in namespace matches.
func WaitForEvent(ctx context.Context, c client.Client, namespace string, matches func(corev1.Event) bool) error {
	return WaitFor(ctx, eventTimeout, func(ctx context.Context) (bool, error) {
		events := &corev1.EventList{}
		if err := c.List(ctx, events, client.InNamespace(namespace)); err != nil {
			return false, err
		}
		return slices.ContainsFunc(events.Items, matches), nil
	})
}
