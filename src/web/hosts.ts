import { z } from 'zod';

/**
 * A Host header value a server answers to: `name` (any port) or `name:port`; an IPv6 address in
 * brackets (`[::1]:8787`). Compared case-insensitively, exactly (no wildcard).
 */
export const HostPattern = z
  .string()
  .min(1)
  .max(300)
  .regex(
    /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+)(:\d{1,5})?$/,
    'a host name or address, with an optional :port (localhost:8787, [::1]:8787)',
  );

/** The loopback names a server bound to a loopback interface on `port` answers to. */
export function loopbackHosts(port: number): string[] {
  return [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`];
}

/** Whether an address is a loopback one (what `actorloop web` may bind). */
export function isLoopbackAddress(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/**
 * Whether the request's Host (the header, else the URL's host) is one of `allowed`. A request
 * with no Host at all, or one that is not a host name, is refused: a browser always sends one,
 * and a rebinding attack is exactly a browser sending a foreign name.
 */
export function hostAllowed(request: Request, allowed: readonly string[]): boolean {
  const host = (request.headers.get('host') ?? new URL(request.url).host).toLowerCase();
  // (not a host name with an optional :port — `a:1.evil.com`, `a@b`, empty — is no allowed host's, whatever it starts with)
  if (!HostPattern.safeParse(host).success) return false;
  const name = host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : host.split(':')[0]!;
  return allowed.some((a) => {
    const pattern = a.toLowerCase();
    return pattern === host || pattern === name;
  });
}
