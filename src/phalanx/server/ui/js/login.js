// The sign-in form: keep the tab the user was sent from (#scalars...). The server never sees a URL's
// hash, so it is added to the page to return to when the form is sent.
const form = document.querySelector("form.login");
form.addEventListener("submit", () => {
  const next = form.elements.namedItem("next");
  if (location.hash && !next.value.includes("#")) next.value += location.hash;
});
// ... and through single sign-on, which leaves for the identity provider and comes back
const sso = document.querySelector("a.button.sso");
if (sso && location.hash) {
  const url = new URL(sso.href);
  const next = url.searchParams.get("next") || "/";
  if (!next.includes("#")) url.searchParams.set("next", next + location.hash);
  sso.href = url.toString();
}
