// The sign-in form: keep the tab the user was sent from (#scalars...). The server never sees a URL's
// hash, so it is added to the page to return to when the form is sent.
const form = document.querySelector("form.login");
form.addEventListener("submit", () => {
  const next = form.elements.namedItem("next");
  if (location.hash && !next.value.includes("#")) next.value += location.hash;
});
