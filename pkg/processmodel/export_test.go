// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package processmodel

// LostLease is lostLease, for the tests that pin it against controller-runtime.
const LostLease = lostLease
